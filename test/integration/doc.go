// Package integration tests the core library (clusterset, aggregate, index) against a local
// fleet of real kube-apiservers, comparing the cache with what each API server lists.
package integration
