// Package server is the daemon's HTTP surface over a clusterset.Registry. It serves two APIs
// from the same stores, hubs and tokens:
//   - the native API under /multicache/v1/, in the wire types of package api: fleet-wide lists
//     with Kubernetes-style selectors and stable paging, single-object reads, a multi-cluster
//     watch with resumable positions, and cluster status;
//   - the Kubernetes API, read-only, at the root (the fleet) and under /clusters/{name} (one
//     cluster): discovery, {Kind}Lists, objects, Tables with a CLUSTER column, watches and
//     watch-lists, as kubectl and client-go informers expect, errors as metav1.Status;
//
// and health, readiness and Prometheus metrics. Everything is served from memory; no request
// reaches a member cluster.
//
// One file per concern: filter.go turns parameters into an aggregate.Query; page.go answers
// native lists and gets; watch.go streams native watches from the hub (hub.go, which also
// answers snapshots at a position); token.go holds both tokens; encode.go and redact.go write
// objects (Secrets without their data); status.go answers the clusters, freshness and
// readiness. The Kubernetes API: kubepath.go parses its paths, catalog.go builds discovery,
// kube.go answers lists and gets, kubeobject.go negotiates and encodes objects and Tables,
// kubewatch.go streams its watches, clusters.go serves clusters.multicache.io. errors.go
// writes Status errors for both; compress.go gzips large answers; server.go holds the
// options, routes, auth and limits.
//
// Paging order is cluster, namespace, name. A continue token is the last key served, so a walk
// visits every object that exists throughout it exactly once, whatever writes happen meanwhile.
//
// A resourceVersion (a native token, or an object's or list's resourceVersion in the
// Kubernetes API) is {epoch, sequence} of the resource's watch hub, never a cluster's
// resourceVersion: clusters' sequences come from different etcds and restart with a cluster.
// A list's position is read before the stores are, so a watch from it may repeat a change the
// list showed and never misses one. A position older than the events kept, or from another
// run, gets 410 Expired. See docs/ARCHITECTURE.md, "Watches and their positions".
package server
