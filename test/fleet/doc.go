// Package fleet runs a "local fleet": N real Kubernetes control planes, each one etcd and one
// kube-apiserver listening on 127.0.0.1, for integration tests, e2e tests, the demo and the
// benchmarks.
//
// A Fleet owns a directory. Every cluster lives in DIR/<name>/ with its own certificates, etcd
// data and logs; DIR/state.json records the PIDs and ports so that a later process (the fleet
// CLI's `down`, for example) can stop exactly what was started; DIR/kubeconfig has one context
// per cluster (fleet-1 … fleet-N by default).
//
// Identities written for every cluster:
//   - DIR/kubeconfig: a ServiceAccount token bound to cluster-admin. It is the credential the
//     cache under test uses, and the one Revoke takes away (401) and Restore gives back.
//   - DIR/admin.kubeconfig: a client certificate in system:masters. The fleet itself, loaders and
//     ground-truth listings use it; it is never revoked.
//   - DIR/limited.kubeconfig: a client certificate for user "fleet-limited", whom RBAC lets read
//     everything except ConfigMaps and Secrets (the 403 cases).
//   - DIR/<name>/exec-token: a static bearer token for user "fleet-exec" in system:masters,
//     accepted through kube-apiserver's --token-auth-file. It is what the exec credential plugin
//     test/fleet/cmd/execplugin hands out, for clusters reached through exec plugins
//     (ClusterProfiles of the Cluster Inventory API). It is in no kubeconfig.
//
// Invariants: every server listens on 127.0.0.1 only; Stop signals only PIDs this package
// recorded and whose command line still names the binary it started; Stop removes the
// directory when the fleet created it.
package fleet
