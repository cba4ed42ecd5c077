// Package watchcache owns the fleet's change stream for one resource, as kube-apiserver's
// storage/cacher owns one resource's: the recent events in order (Cache, a ring fed by the
// aggregate as an every-event handler), the objects as of any position whose later events it
// still keeps (Cache.Snapshot), one codec for every position it hands out (Position and
// Continue: a list's resourceVersion, a continue token, a watch's resourceVersion, of one
// replica or of several merged), and one watcher (Watcher) that serves every watch of every
// API: the snapshot at its start, then the events after it through the watch's query, turning
// an object that starts or stops matching into ADDED or DELETED, with bookmarks.
//
// Positions are the cache's own sequence numbers, never the clusters' resourceVersions: those
// come from different etcds and restart with a cluster. A position of another epoch (another
// run, or a reset after the cache fell behind) or one whose later events are no longer kept is
// expired (410): clients list again.
//
// It knows nothing of HTTP: the API fronts in package server translate between the wire and
// these types.
//
// Files: cache.go (Cache: the ring of events, snapshots, handoffs), watcher.go (Watcher: one
// watch's stream, guard and bookmarks), position.go (positions and continue tokens), size.go
// (the approximate size of an object).
package watchcache
