// Package verify is the convergence checker: it compares what an aggregate holds with what each
// API server itself lists (UID and resourceVersion of every object) and reports every object
// that diverges. Ground truth is a metadata-only LIST, so checking is cheap for the server.
//
// Files: verify.go (Compare: the cache against what each API server lists, and its Report).
package verify
