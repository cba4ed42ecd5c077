//go:build !race

package shard

// raceEnabled: the race detector is on.
const raceEnabled = false
