//go:build !race

package index

// raceEnabled: the race detector is on.
const raceEnabled = false
