//go:build race

package sim

// raceEnabled: the race detector slows a run about tenfold; TestSim runs
// fewer seeds by default.
const raceEnabled = true
