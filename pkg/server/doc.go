// Package server is the daemon's HTTP API over a clusterset.Registry: fleet-wide lists with
// Kubernetes-style selectors and stable paging, single-object reads, a multi-cluster watch with
// resumable per-cluster resourceVersion vectors, cluster status, health, readiness and
// Prometheus metrics. Everything is served from memory; no request reaches a member cluster.
//
// Paging order is cluster, namespace, name. A continue token is the last key served, so a walk
// visits every object that exists throughout it exactly once, whatever writes happen meanwhile.
//
// Watch tokens ("resourceVersion") are base64url JSON {"e": epoch, "v": {cluster: rv}}: the
// daemon's start epoch and, per cluster, the resourceVersion the client has seen. Per-cluster
// resourceVersions are compared as integers, which holds for etcd-backed API servers. A token
// from another daemon run, or older than the events kept (server.watchBuffer), gets 410 Expired.
// The watch hub receives every event (aggregate.HandlerOptions.EveryEvent), in each cluster's
// order, so that a resumed watch neither skips nor merges changes.
package server
