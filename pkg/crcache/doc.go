// Package crcache serves controller-runtime from multicache. It owns:
//
//   - Fleet: the controller-runtime side of a clusterset.Registry. It hands out one Cache per
//     member cluster, and keeps what those caches share: the field indexes added with
//     IndexField, which are the fleet's (each index is computed in every cluster, current and
//     future, as multicluster-runtime's Provider.IndexField does).
//   - Cache: controller-runtime's cache.Cache for one member cluster, read from the
//     Registry's aggregates. Get and List read that cluster's store, with label and field
//     selectors and IndexField as controller-runtime's informer cache has them, including its
//     "not found" and "index does not exist" errors. GetInformer returns an informer that
//     registers through the aggregate's handlers, bound to that cluster
//     (aggregate.HandlerOptions.Cluster). WaitForCacheSync waits for the cluster's resources
//     to sync. Nothing starts an informer: the Registry runs one stack per cluster and
//     resource, shared by every Cache, controller and handler.
//   - NewCacheFunc: a Cache as cluster.Options.NewCache or manager.Options.NewCache take it.
//   - Provider: the Registry's clusters as controller-runtime cluster.Clusters, in the shape of
//     multicluster-runtime's Provider (Get, IndexField, Start with an Aware that Engage is
//     called on). Each engaged cluster reads through its Cache and writes to its API server;
//     its context ends when it leaves the fleet.
//
// Objects are those the Registry caches: its resources, in their decoding (typed for
// built-in kinds, unstructured or metadata-only as configured). A Cache converts them to the
// type asked for (typed, unstructured.Unstructured, metav1.PartialObjectMetadata) and hands
// out copies, as controller-runtime does by default: the cached objects are never mutated.
// A kind the Registry does not cache is an error that names it; controller-runtime would
// start an informer for it, which multicache leaves to its configuration.
//
// Files: cache.go (Cache and Fleet: controller-runtime's cache.Cache over a Registry),
// informer.go (an informer of one kind, over an aggregate), provider.go (Provider: the fleet as
// multicluster-runtime's clusters).
package crcache
