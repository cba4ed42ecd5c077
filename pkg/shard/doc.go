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
//   - Ownership. Who should hold each cluster comes from one assignment over the whole fleet
//     this replica loaded and the members (the live peers that are not leaving, and this
//     replica while it may run clusters): weighted rendezvous (HRW) hashing with bounded
//     loads (assign.go). Each member may own at most ⌈N × weight/Σweights⌉ of
//     the N clusters; (cluster, member) pairs are taken in descending rendezvous score and a
//     cluster goes to the first member with room. 100 clusters over 3 equal replicas give each
//     at most 34 (the benchmark fleet's names: 34/34/32, where plain HRW gave 40/32/28), and
//     every cluster has an owner while there is a member. The assignment is sticky: the pairs
//     of a cluster and the member that holds its fence come first, so a holder within its
//     capacity keeps what it holds. A member that leaves (or dies) thus moves its own clusters
//     and no other; one that joins takes clusters only off members over their new capacity,
//     as many as they are over (TestAssignIsSticky); no cluster moves merely to reach its
//     rendezvous favourite. Without holders (a fleet starting from nothing), measured over 102
//     fleets of 100 and 300 names (TestAssignDisruption), removing one of 3 equal members moves
//     its clusters plus at most 9 others, and adding a cluster to a fleet of 100 changes the
//     owner of at most 2 others: measurements, not proven bounds.
//     Replicas that see the same fleet, members and fences compute the same owner for every
//     cluster. An owner depends on the whole fleet, all members and the holders, though: while
//     two replicas see different fleets (a kubeconfig change reaching them at different times)
//     or different members, a cluster may be nobody's choice (its free fence stays free) or
//     move more than once until they agree (TestDisagreeingFleetsSettle). A running replica
//     does not hand a fence back to the replica it came from within a LeaseDuration of its
//     coming (by its own clock; one shutting down hands everything over: TestHandBack), so two
//     replicas that each name the other pass such a cluster at most once per LeaseDuration
//     meanwhile; three with three different views are not bounded so.
//     A free fence is taken by its owner with optimistic concurrency; a held one moves only
//     when its live holder hands it over, and only to a peer the holder has seen live for a
//     whole LeaseDuration (hysteresis: no held cluster moves to a restarted or flapping peer
//     before that). A planned move never leaves the fence without a live
//     holder.
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
//
// Files: coordinator.go (Coordinator: the Source and the Fleet), options.go (Options and their
// validation), run.go (the loop: renew this replica's Lease, reconcile, hand over at shutdown),
// reconcile.go (what to take, keep and release), assign.go (the bounded-load assignment and
// weights), observe.go (what the Leases say), verify.go (peers that proved their identity),
// names.go (Lease names, labels and annotations), metrics.go.
package shard
