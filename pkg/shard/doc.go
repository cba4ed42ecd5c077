// Package shard shares a fleet's clusters among replicas of the daemon through
// coordination.k8s.io/v1 Leases in a management cluster.
//
// It owns three things, and nothing else:
//
//   - Membership. Each replica holds a peer Lease (multicache-peer-<identity>) that it renews
//     every LeaseDuration/3 and that advertises its URL and weight. A peer is live while this
//     replica has observed its Lease change within the last LeaseDuration, by this replica's own
//     clock (no clock comparison between replicas). A replica shutting down marks its Lease
//     leaving (multicache.io/leaving) before handing its fences over, so that nothing is handed
//     back to it; a crashed replica's Lease is deleted by the live peer with the smallest ID once
//     it has been dead for 5 LeaseDurations and holds no fence.
//   - Fences. Each cluster of the fleet has a fence Lease (multicache-fence-<cluster>, or a hash
//     of the name when the name does not fit) whose holderIdentity is the replica allowed to run
//     it. Fences are not renewed: the holder's peer Lease is the fence's liveness, which keeps
//     Lease writes at peers×3/LeaseDuration per second plus handoffs. The fence of a cluster that
//     left the fleet is deleted by its holder once the cluster stopped (a free one by the live
//     peer with the smallest ID).
//   - Ownership. The replica that should hold a cluster is chosen by weighted rendezvous (HRW)
//     hashing over the live peers. A free fence is taken by that replica with optimistic
//     concurrency; a held one moves only when its live holder hands it over, and only to a peer
//     the holder has seen live for a whole LeaseDuration (hysteresis: restarts and flapping peers
//     move nothing). A planned move never leaves the fence without a live holder.
//
// A Coordinator is a clusterset.Source wrapped around the whole fleet's Source: its Load yields
// only the clusters this replica holds the fence of, may run now (not self-fenced, not handing
// off) and has a warm-up slot for (MaxWarmups), so a clusterset.Registry built on it runs exactly
// this replica's share. Owners, Peers, Generation and WaitChange tell the server where each
// cluster lives.
//
// Invariants:
//   - A replica offers a cluster only while its informer shows the fence held by itself and its
//     own peer Lease was renewed within 2/3 of LeaseDuration (self-fencing); others take a dead
//     holder's fences only LeaseDuration after its Lease last changed, so two replicas run one
//     cluster for at most about one LeaseDuration, and only when a replica loses the management
//     cluster.
//   - A holder hands a fence over only after Local reports the cluster stopped and a Load has
//     returned the set without it (on shutdown, Local alone, at most one LeaseDuration).
//   - Every fence write carries the observed resourceVersion; a conflict means another replica
//     won and nothing is retried blindly.
//   - One goroutine (Run's) owns the state; readers get copies taken under a mutex.
//   - Credentials never appear in logs or errors: nothing here handles them.
package shard
