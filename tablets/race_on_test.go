//go:build race

package tablets

// raceEnabled: the race detector multiplies a test's memory and time;
// TestRecordOfSixteenMillionBlocks leaves its whole-table load out.
const raceEnabled = true
