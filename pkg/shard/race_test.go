//go:build race

package shard

// raceEnabled: the race detector is on, which multiplies the simulation's cost several times.
const raceEnabled = true
