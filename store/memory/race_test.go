//go:build race

package memory_test

// raceEnabled: the race detector slows decisions tenfold, so tests that
// measure over many keys use fewer.
const raceEnabled = true
