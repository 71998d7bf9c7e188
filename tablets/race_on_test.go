//go:build race

package tablets

// raceEnabled: the race detector multiplies a test's memory and time;
// TestRecordOfSixteenMillionBlocks checks the record's size only.
const raceEnabled = true
