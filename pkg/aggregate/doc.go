// Package aggregate is the cluster-qualified view of a fleet: one Aggregate per resource type
// spans the client-go Indexers of every member cluster and reads like one cache.Indexer whose
// keys carry the cluster (see Key).
//
// The Aggregate copies no object: members keep their own client-go stores and the Aggregate
// answers Get/List/ByIndex by routing to them, so memory stays the sum of the member stores.
// Every answer can say which of the clusters it spans had not synced (Select's Result.Unsynced),
// so a partial answer is never silent.
//
// Unified handlers (AddEventHandler) see every member's events with the cluster attached. Each
// handler has its own queue and goroutine, so a slow handler delays neither the others nor the
// cache; the queue is fair across clusters and keeps per-object order; and it is bounded by the
// number of distinct objects, because pending events for one object are merged while the handler
// lags (it always sees the latest state, in order). A handler added with
// HandlerOptions.EveryEvent instead gets every event, in each cluster's arrival order, as a
// watch relay needs; its backlog is then bounded by events. A member that joins produces adds, one that
// leaves produces deletes (cache.DeletedFinalStateUnknown), and a member replaced by a new
// informer (a rotated credential) produces only the differences.
package aggregate
