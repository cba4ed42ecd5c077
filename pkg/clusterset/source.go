package clusterset

import (
	"context"

	"k8s.io/client-go/rest"
)

// ClusterConfig is one cluster as a Source yields it.
type ClusterConfig struct {
	// Name is the cluster's name in keys, queries and status. Valid per
	// aggregate.ValidateClusterName.
	Name string
	// Origin says where it came from, e.g. `context "kind-a" in /home/me/.kube/config`.
	Origin string
	// Config reaches the cluster. The Registry copies it before changing QPS or user agent.
	// Nil when Err is set.
	Config *rest.Config
	// Err, when set, says why the source could not build Config (a Secret holding a broken
	// kubeconfig). The cluster is engaged in state Failed with this error in its status and
	// touches no other cluster; it restarts when its Fingerprint changes.
	Err error
	// Fingerprint changes exactly when the server or the credentials change; the Registry then
	// restarts the cluster's stacks.
	Fingerprint string
	// Health, when set, is the source's word that the cluster is unhealthy (a ClusterProfile
	// whose ControlPlaneHealthy condition turned False). The cluster keeps running and its
	// cached objects stay; its status is Degraded with Health as its error until the source
	// clears it. A change of Health alone restarts nothing.
	Health string
	// Waiting, when set, is the source's word that the cluster is in the fleet but held back
	// (a ClusterProfile whose control plane has not been healthy yet). The Registry engages it
	// with no stacks: it is Pending, with Waiting as its error, and each resource NotServed, so
	// that it lists nothing and holds back no read or readiness. When Waiting is cleared, the
	// cluster starts. Waiting wins over Err.
	Waiting string
}

// Source is where clusters come from.
type Source interface {
	// Load returns the clusters the source holds now. A non-nil error with clusters means some
	// entries were bad (and are named in the error) while the returned ones are good.
	Load() ([]ClusterConfig, error)
	// Changes receives a value whenever Load may return something new, until ctx ends.
	Changes(ctx context.Context) <-chan struct{}
}

// A HandoffSource is a Source whose Load may leave out clusters that stay in the fleet: another
// replica runs them now (a shard.Coordinator's share). The Registry stops such a cluster as a
// handoff, not a removal: its objects leave the aggregates through aggregate.Membership.Handoff,
// so that whoever relays changes (the server's watches) is told the cluster moved, not that its
// objects were deleted.
type HandoffSource interface {
	Source
	// Retains reports whether cluster, left out of Load, is still in the fleet.
	Retains(cluster string) bool
}

// Static is a Source with a fixed set of clusters, for embedding and tests.
type Static []ClusterConfig

// Load returns the clusters.
func (s Static) Load() ([]ClusterConfig, error) { return s, nil }

// Changes never fires.
func (s Static) Changes(ctx context.Context) <-chan struct{} { return nil }

// CompleteError reports bad entries of a load that is complete nonetheless: every cluster
// missing from it has left the source. Without it, an error from Load makes the load partial
// (see Source.Load) and the Registry removes nothing.
type CompleteError struct{ Err error }

func (e *CompleteError) Error() string { return e.Err.Error() }
func (e *CompleteError) Unwrap() error { return e.Err }
