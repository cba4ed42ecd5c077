// Package clusterset turns a Source of clusters (package sources: kubeconfig contexts, cluster
// Secrets, ClusterProfiles of the Cluster Inventory API; Static here) into running client-go
// stacks, one Reflector → FIFO → Indexer (an informer.Informer: client-go's, with its handlers
// called on its own goroutine) per cluster × resource, and feeds them into one
// aggregate.Aggregate per resource.
//
// A Registry owns the lifecycle: Start(ctx) engages every cluster its Source yields, resolves
// the configured resources through each cluster's own discovery, and keeps per cluster and per
// resource a Status (Pending, Syncing, Synced, Degraded, Failed, NotServed) with the last error
// in plain words. When the source changes, clusters are engaged, disengaged (their goroutines
// end and their objects leave the aggregate as deletes) or, when their server or credentials
// change, restarted: the old stacks stop first, informers included, then the new ones replace
// them in the aggregates, which tell handlers only what differs. A cluster's runs never
// overlap, and no change waits for another cluster. A source may hold a cluster back
// (ClusterConfig.Waiting: engaged, running nothing) or call it unhealthy (ClusterConfig.Health:
// Degraded, its cache kept) without restarting it.
//
// Each stack's first list is either client-go's LIST from the watch cache or its streamed
// watch-list, chosen per list by its estimated size within a fleet-wide budget (unpaged.go).
//
// Objects are decoded as typed (protobuf) for built-in kinds, unstructured for CRDs, or
// metadata-only on request. A typed LIST is read into a buffer the size of the resource's
// last list and decoded into room made for its items (listdecode.go); what comes out is what
// client-go's REST client would have returned. The default transform drops managedFields and kubectl's
// last-applied annotation and shares repeated parts across objects (package intern).
//
// Options types carry their defaults and validation (Options, ResourceSpec);
// package config maps the YAML file onto them.
//
// Invariants: a cluster's failure stays in that cluster's status and goroutines; no query waits
// on a cluster; credentials never appear in errors or logs.
//
// Files: registry.go (Registry and Options), source.go (Source, ClusterConfig, Static),
// runner.go (one cluster's runner: probe, resolve the resources, start and retire its
// stacks), stack.go (one cluster × resource: reflector,
// DeltaFIFO, indexer, with its lists), resource.go (ResourceSpec and modes), transform.go (the
// transform that trims and interns objects), unpaged.go (how first lists are made, and their
// budget), listdecode.go (LIST bodies read into sized buffers), progress.go (sync progress of a
// first list), status.go (ClusterStatus, ResourceStatus and their changes), handover.go (a
// stopped cluster's state, shelved for its next owner).
package clusterset
