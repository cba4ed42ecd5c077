package shard

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	coordv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Names, labels and annotations of the Leases. Every Lease this package writes carries
// labelLease, which is also what its informer selects.
const (
	peerPrefix  = "multicache-peer-"
	fencePrefix = "multicache-fence-"

	labelLease = "multicache.io/lease" // "peer" or "fence"
	kindPeer   = "peer"
	kindFence  = "fence"

	annoURL     = "multicache.io/advertise-url"
	annoWeight  = "multicache.io/weight"
	annoCluster = "multicache.io/cluster" // on every fence: the cluster's real name
	annoLeaving = "multicache.io/leaving" // "true" on a peer Lease whose replica is shutting down
	// annoHandedFrom, on a fence its holder handed over, is that holder's advertise URL: the
	// new holder takes the cluster's cached state from there (Owner.From).
	annoHandedFrom = "multicache.io/handed-over-from"
	// annoHandedBy is that holder's ID: with peer certificates, the new holder asks for the
	// state only a replica whose certificate names this ID.
	annoHandedBy = "multicache.io/handed-over-by"
)

// peerLeaseName is the name of a replica's peer Lease. Options.Validate makes it a DNS label.
func peerLeaseName(id string) string { return peerPrefix + id }

// fenceLeaseName is the name of a cluster's fence Lease: the prefix and the cluster name when
// that is a valid object name (a DNS subdomain of at most 253 characters), else the prefix and
// the first 16 hex digits of the name's SHA-256 (the annotation keeps the real name).
func fenceLeaseName(cluster string) string {
	n := fencePrefix + cluster
	if len(validation.IsDNS1123Subdomain(n)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(cluster))
	return fencePrefix + hex.EncodeToString(sum[:8])
}

// leaseKind is "peer", "fence" or something this package does not use.
func leaseKind(l *coordv1.Lease) string { return l.Labels[labelLease] }

// peerID is the replica a peer Lease belongs to, from its name (the holder identity says the
// same for Leases this package wrote).
func peerID(l *coordv1.Lease) string { return strings.TrimPrefix(l.Name, peerPrefix) }

// fenceCluster is the cluster a fence Lease guards: its annotation, else what its name says.
func fenceCluster(l *coordv1.Lease) string {
	if c := l.Annotations[annoCluster]; c != "" {
		return c
	}
	return strings.TrimPrefix(l.Name, fencePrefix)
}

// holderOf is a fence's holder, "" when there is no fence or no holder.
func holderOf(l *coordv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// rvOf is a Lease's resourceVersion, "" for none.
func rvOf(l *coordv1.Lease) string {
	if l == nil {
		return ""
	}
	return l.ResourceVersion
}

// MaxWeight bounds a replica's weight (sharding.weight), and a peer Lease's weight is capped at
// it: whoever can write one Lease in the sharding namespace cannot claim most of the fleet
// with a huge weight.
const MaxWeight = 100

// peerWeight reads a peer Lease's weight; a missing or bad annotation counts as 1, so that a
// peer written by another version still gets a share; a weight over MaxWeight counts as
// MaxWeight.
func peerWeight(l *coordv1.Lease) int {
	w, err := strconv.Atoi(l.Annotations[annoWeight])
	if err != nil || w < 1 {
		return 1
	}
	return min(w, MaxWeight)
}
