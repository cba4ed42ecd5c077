package shard

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"maps"
	"math"
	"slices"

	coordv1 "k8s.io/api/coordination/v1"
)

// member is a peer as ownership sees it: a live replica and its weight (1..MaxWeight, as
// Options.Validate and peerWeight guarantee).
type member struct {
	id     string
	weight int
}

// unit maps peer and cluster to a number in (0,1), uniformly: the first 53 bits of
// SHA-256(peer + "/" + cluster), centred in their interval so that neither 0 nor 1 occurs.
func unit(peer, cluster string) float64 {
	sum := sha256.Sum256([]byte(peer + "/" + cluster))
	x := binary.BigEndian.Uint64(sum[:8]) >> 11
	return (float64(x) + 0.5) / (1 << 53)
}

// score is the weighted rendezvous score -weight/ln(u). For independent uniform u, the peer
// with the highest score is each peer with probability weight/Σweights.
func score(peer, cluster string, weight int) float64 {
	return -float64(weight) / math.Log(unit(peer, cluster))
}

// The slack is how far above its exact weighted share a member's capacity lies, as the
// fraction slackNum/slackDen. It is 0: with sticky assignment (assign's held), a holder within
// its capacity keeps its clusters whatever the fleet or the peers do, so a slack would no
// longer save moves, and it would keep a joining replica from taking anything (6 clusters over
// 3 replicas at a slack of 1/16 let each of two holders keep 3, leaving the third none).
// 100 clusters over 3 equal members: at most ⌈100/3⌉ = 34 each.
const (
	slackNum = 0
	slackDen = 16
)

// capacity is the most clusters a member of weight w may own out of n when the members'
// weights sum to total: ⌈n × w/total × (1 + slack)⌉, in integers so that no rounding error
// of an exact share adds a cluster. It is at least 1 when n and w are, and the capacities of
// all members sum to at least n.
func capacity(n, w, total int) int {
	num := int64(n) * int64(w) * (slackDen + slackNum)
	den := int64(total) * slackDen
	return int((num + den - 1) / den)
}

// assignment is the owner of every cluster of one fleet over one set of members: rendezvous
// hashing with bounded loads. Every (cluster, member) pair is taken in descending score order
// (ties: smaller member ID, then smaller cluster name), and the cluster goes to the member if
// it has no owner yet and the member is below its capacity.
//
// Invariants:
//   - It is a function of the set of members (ID and weight) and the set of clusters: the
//     order of the input slices and duplicates in them do not matter, so replicas that see the
//     same fleet and the same live peers compute the same owner for every cluster.
//   - With at least one member, every cluster has an owner (the capacities sum to at least the
//     number of clusters); with none, every owner is "".
//   - No member owns more than its capacity, ⌈N × w/W × (1 + slack)⌉.
//   - A cluster's owner is its rendezvous favourite unless that member is full of clusters
//     that score higher for it; with unbounded capacities this is plain weighted rendezvous
//     hashing.
//   - Unlike plain rendezvous hashing, one cluster's owner depends on the whole fleet: adding
//     or removing a cluster or a member may move a few other clusters between the remaining
//     members (TestAssignDisruption measures how many).
type assignment struct {
	members []member // sorted by ID, one per ID
	names   []string // sorted, without duplicates
	held    map[string]string
	owners  map[string]string
}

// owner is the member that should hold cluster, "" for a cluster outside the assignment, when
// there are no members, or on a nil assignment.
func (a *assignment) owner(cluster string) string {
	if a == nil {
		return ""
	}
	return a.owners[cluster]
}

// counts is how many clusters each member owns.
func (a *assignment) counts() map[string]int {
	out := make(map[string]int, len(a.members))
	for _, o := range a.owners {
		out[o]++
	}
	return out
}

// same reports whether a was computed for these members and clusters (as sets), and the same
// holders.
func (a *assignment) same(members []member, clusters []string, held map[string]string) bool {
	if a == nil || !slices.Equal(a.members, normMembers(members)) || !maps.Equal(a.held, held) {
		return false
	}
	if strictlySorted(clusters) {
		return slices.Equal(a.names, clusters) // the common case: no copy
	}
	return slices.Equal(a.names, normNames(clusters))
}

// assign computes the assignment of clusters over members. It scores N × R (cluster, member)
// pairs: call it once per change of either set, not per cluster (loopState.assignmentFor keeps
// the scores while only the holders change).
//
// held (cluster → the replica that holds its fence now; nil for none) makes it sticky: a
// cluster whose holder is a member stays with it while the holder is within its capacity,
// those pairs taken first, in descending score. Only the clusters of a member that left, of
// a member over its capacity (the lowest-scoring of them), and free ones are placed by score
// among the members with room. So a member that leaves moves its clusters alone, one that
// joins takes clusters only from members over their new capacity, and clusters never move
// merely to reach their rendezvous favourite. Replicas agree when they see the same fences.
func assign(members []member, clusters []string, held map[string]string) *assignment {
	return newScores(normMembers(members), normNames(clusters)).assign(held)
}

// scores are the rendezvous scores of every (cluster, member) pair of one set of members and
// one set of clusters, and each cluster's members in descending score order: what every
// assignment over those sets starts from, whatever the holders. Hashing the pairs is most of
// an assignment's cost (10,000 clusters × 30 members: 300,000 SHA-256 sums); the holders
// change with every fence write, the sets rarely.
type scores struct {
	members []member // normalized (normMembers)
	names   []string // normalized (normNames)
	score   []float64
	// order holds, for cluster c, member indexes at c*len(members) onwards, by descending
	// score, ties to the smaller index (the smaller ID).
	order []int32
}

func newScores(ms []member, names []string) *scores {
	s := &scores{members: ms, names: names}
	r := len(ms)
	s.score = make([]float64, len(names)*r)
	s.order = make([]int32, len(names)*r)
	for c, name := range names {
		row, ord := s.score[c*r:(c+1)*r], s.order[c*r:(c+1)*r]
		for m, mb := range ms {
			row[m] = score(mb.id, name, mb.weight)
			ord[m] = int32(m)
		}
		slices.SortFunc(ord, func(x, y int32) int {
			if row[x] != row[y] {
				return cmp.Compare(row[y], row[x]) // descending
			}
			return cmp.Compare(x, y)
		})
	}
	return s
}

// over reports whether s scores exactly these normalized members and names.
func (s *scores) over(ms []member, names []string) bool {
	return s != nil && slices.Equal(s.members, ms) && slices.Equal(s.names, names)
}

// before is the order in which assign takes (cluster, member) pairs: descending score, then
// smaller member index, then smaller cluster index. It is a total order.
func (s *scores) before(c1, m1, c2, m2 int32) bool {
	r := int32(len(s.members))
	x, y := s.score[c1*r+m1], s.score[c2*r+m2]
	if x != y {
		return x > y
	}
	if m1 != m2 {
		return m1 < m2
	}
	return c1 < c2
}

// assign is the assignment over s's sets with these holders. Conceptually every
// (cluster, member) pair is taken in one order, the holders' pairs first and each part in
// before's order, and a cluster goes to the member of the first pair that finds the cluster
// unowned and the member below its capacity. The holders' pairs (at most one per cluster) are
// sorted; the rest are merged from each cluster's own sorted list, a heap holding each unowned
// cluster's best pair not yet taken: O(N log N) once scored, not O(N R log(N R)).
func (s *scores) assign(held map[string]string) *assignment {
	ms, names := s.members, s.names
	a := &assignment{members: ms, names: names, held: maps.Clone(held), owners: make(map[string]string, len(names))}
	if len(ms) == 0 || len(names) == 0 {
		return a
	}
	r := len(ms)
	total := 0
	index := make(map[string]int32, r)
	for i, m := range ms {
		total += m.weight
		index[m.id] = int32(i)
	}
	room := make([]int, r)
	for i, m := range ms {
		room[i] = capacity(len(names), m.weight, total)
	}
	owner := make([]int32, len(names))
	holder := make([]int32, len(names)) // the holder's member index, -1 if not a member
	type pair struct{ c, m int32 }
	var sticky []pair
	for c, name := range names {
		owner[c], holder[c] = -1, -1
		if m, ok := index[held[name]]; ok && held[name] != "" {
			holder[c] = m
			sticky = append(sticky, pair{int32(c), m})
		}
	}
	slices.SortFunc(sticky, func(x, y pair) int {
		if s.before(x.c, x.m, y.c, y.m) {
			return -1
		}
		return 1 // pairs are distinct: never equal
	})
	left := len(names)
	for _, p := range sticky {
		if room[p.m] > 0 {
			owner[p.c] = p.m
			room[p.m]--
			left--
		}
	}

	// The rest: each unowned cluster's pairs in its own order, its holder's pair skipped (taken
	// or refused above; a full member stays full).
	next := make([]int, len(names)) // position in the cluster's order of its next pair
	advance := func(c int32) bool {
		ord := s.order[int(c)*r : (int(c)+1)*r]
		for next[c] < r && ord[next[c]] == holder[c] {
			next[c]++
		}
		return next[c] < r
	}
	head := func(c int32) int32 { return s.order[int(c)*r+next[c]] }
	h := &pairHeap{less: func(x, y int32) bool { return s.before(x, head(x), y, head(y)) }}
	for c := range names {
		if owner[c] < 0 && advance(int32(c)) {
			h.items = append(h.items, int32(c))
		}
	}
	h.init()
	for left > 0 && len(h.items) > 0 {
		c := h.items[0]
		m := head(c)
		if room[m] > 0 {
			owner[c] = m
			room[m]--
			left--
			h.pop()
			continue
		}
		next[c]++
		if advance(c) {
			h.fix0()
		} else {
			h.pop() // cannot happen: capacities sum to at least the clusters left
		}
	}
	for c, m := range owner {
		if m >= 0 {
			a.owners[names[c]] = ms[m].id
		}
	}
	return a
}

// pairHeap is a binary min-heap of cluster indexes under less.
type pairHeap struct {
	items []int32
	less  func(x, y int32) bool
}

func (h *pairHeap) init() {
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// fix0 restores the heap after the first item's key grew.
func (h *pairHeap) fix0() { h.down(0) }

func (h *pairHeap) pop() {
	n := len(h.items) - 1
	h.items[0] = h.items[n]
	h.items = h.items[:n]
	if n > 0 {
		h.down(0)
	}
}

func (h *pairHeap) down(i int) {
	n := len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && h.less(h.items[r], h.items[l]) {
			j = r
		}
		if !h.less(h.items[j], h.items[i]) {
			return
		}
		h.items[i], h.items[j] = h.items[j], h.items[i]
		i = j
	}
}

// normMembers is members sorted by ID, one per ID (the largest weight when an ID repeats),
// each weight at least 1 so that every member has room, and bounded (boundWeights).
func normMembers(members []member) []member {
	ms := slices.Clone(members)
	for i := range ms {
		ms[i].weight = max(ms[i].weight, 1)
	}
	slices.SortFunc(ms, func(x, y member) int {
		if c := cmp.Compare(x.id, y.id); c != 0 {
			return c
		}
		return cmp.Compare(y.weight, x.weight)
	})
	return boundWeights(slices.CompactFunc(ms, func(x, y member) bool { return x.id == y.id }))
}

// boundWeights caps each member's weight at the sum of the other members' weights, so that no
// one member, however large the weight its peer Lease claims, owns more than half of the
// fleet while another member is live. Every member sees the same set of members and weights,
// so every replica caps them alike. A lone member keeps its weight (it owns everything
// anyway). The price: of two replicas, neither can be given more than half.
func boundWeights(ms []member) []member {
	if len(ms) < 2 {
		return ms
	}
	total := 0
	for _, m := range ms {
		total += m.weight
	}
	for i, m := range ms {
		ms[i].weight = min(m.weight, total-m.weight)
	}
	return ms
}

// normNames is a sorted copy of names without duplicates.
func normNames(names []string) []string {
	out := slices.Clone(names)
	if !strictlySorted(out) {
		slices.Sort(out)
		out = slices.Compact(out)
	}
	return out
}

func strictlySorted(names []string) bool {
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			return false
		}
	}
	return true
}

// assignmentFor is the assignment of names over members, the last one again when both sets
// are unchanged: a reconcile pass runs up to ten times a second while it waits on Local, and
// the members and the fleet rarely change between passes.
// The scores are kept while the members and the fleet stay the same, so that a change of
// holders alone costs no hashing.
func (st *loopState) assignmentFor(members []member, names []string, held map[string]string) *assignment {
	if !st.assigned.same(members, names, held) {
		ms, ns := normMembers(members), normNames(names)
		if !st.scores.over(ms, ns) {
			st.scores = newScores(ms, ns)
		}
		st.assigned = st.scores.assign(held)
	}
	return st.assigned
}

// heldBy is each fence's holder, for assign: the clusters of fences, held or not.
func heldBy(fences map[string]*coordv1.Lease) map[string]string {
	out := make(map[string]string, len(fences))
	for name, f := range fences {
		if h := holderOf(f); h != "" {
			out[name] = h
		}
	}
	return out
}
