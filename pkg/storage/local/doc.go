// Package local is the storage.Reader and storage.Status of this replica: its Registry's
// aggregates and its watch caches (one per resource, registered on the resource's aggregate by
// New). Both APIs and every part of a plan read through it; it knows nothing of HTTP.
//
// A request's selection is resolved once (select.go), against one read of the Registry's
// status, for the caller of its context: the clusters it spans (named, or those a cluster
// selector accepts, judged per object for a caller who may read every cluster, so that a
// cluster that joins comes to match), the clusters the caller may not read (left out of the
// fleet, 403 when named), and, for a part of a plan (Selection.Part), exactly the plan's
// clusters. A read that must hold a cluster whole is 429 while the cluster is not complete here
// (ready.go): checked before the read and again after it (after a watch has read its position
// too), so that a cluster handed off meanwhile is never missing from an answer.
//
// Invariants: a list's resourceVersion is at least every item's (an item whose newest event
// the watch cache put after the list's position shows the list's position); every watch, one
// that selects no cluster too, runs a watchcache.Watcher, with its guard and its bookmarks;
// Secrets are redacted here, as a read policy, once.
//
// Files: local.go (Storage, New, the view of one request), select.go (a Selection resolved),
// scope.go (what the caller may read), query.go (a Selection as an aggregate.Query), ready.go
// (completeness), list.go (List and Get), watch.go (Watch), status.go (Status: clusters,
// definitions, resources), redact.go (Secrets without their data), summary.go (Summarize),
// owner.go (top-level owners: the owner key and selection), sort.go (sorted lists).
package local
