// Package fakeapi is a minimal kube-apiserver stand-in for unit tests of the daemon's own
// policies (readiness, limits, restarts): discovery of core/v1 pods, /version, an empty pod list
// and a watch that stays open. It can be made slow or down. The integration, chaos and e2e suites
// run real API servers; this never stands in for them.
//
// Files: fakeapi.go (Server).
package fakeapi
