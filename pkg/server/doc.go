// Package server is the daemon's HTTP API over a clusterset.Registry, in the wire types of
// package api: fleet-wide lists with Kubernetes-style selectors and stable paging,
// single-object reads, a multi-cluster watch with resumable positions, cluster status, health,
// readiness and Prometheus metrics. Everything is served from memory; no request reaches a
// member cluster.
//
// One file per concern: filter.go turns parameters into an aggregate.Query; page.go answers
// lists and gets; watch.go streams watches from the hub (hub.go); token.go holds both tokens;
// encode.go and redact.go write objects (Secrets without their data); status.go answers the
// clusters, freshness and readiness; server.go holds the options, routes, auth and limits.
//
// Paging order is cluster, namespace, name. A continue token is the last key served, so a walk
// visits every object that exists throughout it exactly once, whatever writes happen meanwhile.
//
// A resourceVersion is {epoch, sequence} of the resource's watch hub, never a cluster's
// resourceVersion: clusters' sequences come from different etcds and restart with a cluster.
// A list's position is read before the stores are, so a watch from it may repeat a change the
// list showed and never misses one. A position older than the events kept, or from another
// run, gets 410 Expired. See docs/ARCHITECTURE.md, "Watches and their positions".
package server
