// Package aggregate is the cluster-qualified view of a fleet: one Aggregate per resource type
// spans the client-go Indexers of every member cluster and reads like one cache.Indexer whose
// keys carry the cluster (Key, "cluster|namespace/name").
//
// Reading. The Aggregate copies no object: members keep their own client-go stores and the
// Aggregate answers Get, List, ByIndex and Select by routing to them, so memory stays the sum of
// the member stores. Cluster(name) narrows it to one plain client-go Indexer. A Query has one
// meaning wherever it is judged: Select answers it from the indexes, Matches judges one object
// (or the Attributes kept of one). Every Select says which clusters it spans had not synced
// (Result.Unsynced), so a partial answer is never silent.
//
// Handlers. AddEventHandler adds a Handler, client-go's ResourceEventHandler with a cluster
// argument. Each handler has its own queue and goroutine, so a slow handler delays neither the
// others nor the cache; its queue is fair across clusters and keeps each object's order. By
// default pending events of one object are merged while the handler lags, so its backlog is
// bounded by distinct objects; HandlerOptions.EveryEvent keeps every event instead, in each
// cluster's arrival order, bounded by MaxPending. Every event is the transition from what that
// handler was told to the new state: a cluster that joins produces adds, one that leaves
// produces deletes (cache.DeletedFinalStateUnknown) of what the handler was told, and one whose
// informer is replaced (rotated credentials, another server) produces only the differences.
// QueueKeys feeds client-go workqueues; HandlerOptions.ResyncPeriod replays objects as updates.
//
// Membership. New returns, with the Aggregate, the Membership through which its owner (the
// clusterset.Registry) joins, replaces and removes members; readers never see it.
//
// Answers kept by events. Summaries and sorted lists that would read every object keep live
// indexes instead, each a handler like any other: kept counts (KeepCounts, namespace by
// default) and learned counts (a summary key asked again) per cluster and value, and sort
// indexes (an order of sorted lists asked again), a B-tree per cluster. Each answers once it
// has had every cluster's list, trails the stores by its handler's lag, and is bounded (learned
// and sort indexes are evicted least recently asked).
//
// Files: aggregate.go (the Aggregate: its reads, indexes and members), membership.go (a
// member's informer: how it joins, is replaced, hands off and leaves), handlers.go (the fleet's
// handlers and their registrations), queue.go (each handler's queue of pending events),
// query.go (Query, Select and Matches), key.go (Key: cluster, namespace, name), workqueue.go
// (QueueKeys, for client-go workqueues), summary.go (Summarize: counts in groups by cluster,
// namespace, label, JSONPath or index), learned.go (kept and learned count indexes), sorted.go
// (sort indexes and SortedAfter), indexset.go (the bounds both kinds of learned index share).
package aggregate
