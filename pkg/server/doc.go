// Package server wires the daemon's HTTP surface over a clusterset.Registry; it reads and
// encodes nothing itself. New builds, from Options:
//   - this replica's storage (package storage/local) and, with a Fleet, the fleet's
//     (storage/fanout, over storage/peer clients of the other replicas);
//   - the fronts that translate requests into Reader calls: the Kubernetes API (package
//     kubeapi, with kubeapi/discovery) at the root and under /clusters/{name}, and the native
//     API (package nativeapi) under /multicache/v1/;
//   - the peer envelope (storage/peer.Handler) at /multicache/v1/peer/, which only replicas
//     under their peer certificates may call when auth is on, and the handover endpoint;
//
// and serves them behind authentication, limits and the coordination gate (a replica not yet
// coordinated with the others answers every read with 429), with /healthz, /readyz, /metrics
// and, when asked for, /debug/pprof/. Everything is served from memory; no request reaches a
// member cluster.
//
// Files: server.go (Options, Server, New, the mux and its gates), ready.go (/readyz),
// metrics.go (the Prometheus metrics and /metrics), handover.go (the handover endpoint: a
// stopped cluster's state, for the replica that takes the cluster).
package server
