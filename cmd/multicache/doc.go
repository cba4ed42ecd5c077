// Command multicache keeps one live, indexed cache of a fleet of Kubernetes clusters and
// answers fleet inventory questions over HTTP (its own API under /multicache/v1/, and a
// read-only Kubernetes API that kubectl and client-go read as one API server with a CLUSTER
// column) and from the command line.
//
//	multicache serve --config configs/multicache.yaml
//	kubectl --server http://127.0.0.1:8080 get pods -A -l app=web
//	multicache get pods -A -l app=web --cluster fleet-1
//	multicache clusters --watch
//
// It owns the command line: flags and the config file, and signals; package internal/daemon
// builds the daemon from the config (logging, the registry's source, sharding, the server) and
// runs it. It is a module of its own because its Table columns for
// built-in kinds come from Kubernetes' own printers (package kubeprinters, which needs
// k8s.io/kubernetes); the library module does not depend on k8s.io/kubernetes. Build it with
// `make build` or `go -C cmd/multicache build`.
//
// Files: main.go (the root command), serve.go (serve: its flags into a config), get.go (get),
// summary.go (summary), clusters.go (clusters), verify.go (verify), peercerts.go (peer-certs), client.go (the client
// commands' flags).
package main
