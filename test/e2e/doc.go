// Package e2e drives the real multicache binary against a local fleet: the HTTP API's filters,
// paging and watch against ground truth listed with client-go, documented errors, auth, the
// CLI's output and shutdown. The kind provider (kind_test.go) is opt-in.
package e2e
