//go:build !race

package tablets

const raceEnabled = false
