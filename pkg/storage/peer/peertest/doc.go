// Package peertest serves the peer envelope as replicas of other releases do, for tests of a
// rolling update that read through them.
//
// Files: peertest.go (PreviousRelease).
package peertest
