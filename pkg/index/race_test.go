//go:build race

package index

// raceEnabled: the race detector is on, which multiplies the cost of long evaluations.
const raceEnabled = true
