// Package daemon is the multicache daemon as a process: Build makes it from a config (logger,
// memory limit, management client, cluster source, shard Coordinator, Registry, server and
// listener), and Run serves until its context ends, then hands this replica's clusters to the
// others and shuts down.
//
// Files:
//   - daemon.go: Options, Daemon, Build, Run and the graceful shutdown;
//   - sources.go: the cluster source, the management client, the shard Coordinator and peer
//     trust of a config;
//   - gc.go: the garbage collector and memory limit during the initial sync, and the return of
//     freed memory to the operating system.
package daemon
