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
// The change stream, its positions and the watcher every watch runs are package watchcache's;
// authentication, limits, timeouts, compression, Status errors and request metrics are package
// filters'; who may read what is package auth's. Here, one file per concern: filter.go turns
// parameters into an aggregate.Query, params.go decodes list options as kube-apiserver does;
// page.go answers native lists and gets, watch.go native watches; encode.go and redact.go
// write objects (Secrets without their data); status.go answers the clusters, freshness and
// readiness. The Kubernetes API: kubepath.go parses its paths, catalog.go builds discovery,
// kube.go answers lists and gets, kubeobject.go negotiates and encodes objects and Tables,
// kubewatch.go streams its watches, clusters.go serves clusters.multicache.io. With a Fleet,
// fleet.go plans which replica answers which clusters; part.go reads one replica's part of a
// plan through a partReader (this replica's in process, a peer's over HTTP); fleetread.go is
// the fleet as a partReader too, which splits a request over the parts and merges their
// answers; fanout.go, fanout_kube.go and fanin.go route the fleet's requests and write what
// a reader answers; planguard.go keeps every answer to its plan, peertrust.go tells owners
// who the caller is. server.go holds the options and routes.
//
// Paging order is cluster, namespace, name. A continue token is the last key served, so a walk
// visits every object that exists throughout it exactly once, whatever writes happen meanwhile.
//
// A resourceVersion (a native token, or an object's or list's resourceVersion in the
// Kubernetes API) is {epoch, sequence} of the resource's watch cache, never a cluster's
// resourceVersion: clusters' sequences come from different etcds and restart with a cluster.
// A list's position is read before the stores are, so a watch from it may repeat a change the
// list showed and never misses one. A position older than the events kept, or from another
// run, gets 410 Expired. See docs/ARCHITECTURE.md, "Watches and their positions".
package server
