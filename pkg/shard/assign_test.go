package shard

import (
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"testing"
	"time"
)

func clusterNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("cluster-%03d", i)
	}
	return out
}

// fleetNames are the benchmark fleet's 100 names: 5 API servers × 20 contexts. Plain
// rendezvous hashing splits them 40/32/28 over r1, r2, r3.
func fleetNames() []string {
	var out []string
	for s := 1; s <= 5; s++ {
		for i := 1; i <= 20; i++ {
			out = append(out, fmt.Sprintf("fleet-%d-a%02d", s, i))
		}
	}
	return out
}

// testFleets are the fleets the disruption figures are measured over: the benchmark's names,
// 300 cluster-NNN names, and 100 other fleets of 100 names.
func testFleets() map[string][]string {
	out := map[string][]string{"benchmark": fleetNames(), "cluster-NNN": clusterNames(300)}
	for f := range 100 {
		names := make([]string, 100)
		for i := range names {
			names[i] = fmt.Sprintf("f%d-ctx-%d", f, i)
		}
		out[fmt.Sprintf("f%d", f)] = names
	}
	return out
}

func equal(ids ...string) []member {
	out := make([]member, len(ids))
	for i, id := range ids {
		out[i] = member{id: id, weight: 1}
	}
	return out
}

// favourite is plain weighted rendezvous hashing: the member with the highest score.
func favourite(members []member, cluster string) string {
	best, bestScore := "", 0.0
	for _, m := range members {
		if s := score(m.id, cluster, m.weight); best == "" || s > bestScore {
			best, bestScore = m.id, s
		}
	}
	return best
}

func totalWeight(members []member) int {
	w := 0
	for _, m := range members {
		w += m.weight
	}
	return w
}

// checkBounded fails unless every cluster has one owner among members and no member owns
// more than its capacity.
func checkBounded(t *testing.T, what string, members []member, names []string, a *assignment) map[string]int {
	t.Helper()
	got := a.counts()
	ids := map[string]bool{}
	for _, m := range members {
		ids[m.id] = true
	}
	for _, name := range names {
		if o := a.owner(name); !ids[o] {
			t.Fatalf("%s: %s has owner %q, not a member", what, name, o)
		}
	}
	if len(a.owners) != len(names) {
		t.Fatalf("%s: %d owners for %d clusters", what, len(a.owners), len(names))
	}
	bounded := normMembers(members) // the weights as they count
	for _, m := range bounded {
		if limit := capacity(len(names), m.weight, totalWeight(bounded)); got[m.id] > limit {
			t.Errorf("%s: %s owns %d of %d clusters, over its capacity %d (all: %v)", what, m.id, got[m.id], len(names), limit, got)
		}
	}
	return got
}

func TestAssignBalancesEqualMembers(t *testing.T) {
	three := equal("r1", "r2", "r3")
	names := fleetNames()
	plain := map[string]int{}
	for _, name := range names {
		plain[favourite(three, name)]++
	}
	if limit := capacity(100, 1, 3); limit != 34 {
		t.Fatalf("capacity of one of 3 equal members over 100 clusters = %d, want 34", limit)
	}
	if slices.Max(slices.Collect(maps.Values(plain))) <= 34 {
		t.Fatalf("plain rendezvous hashing gives %v: these names no longer test the bound", plain)
	}
	got := checkBounded(t, "benchmark fleet", three, names, assign(three, names, nil))
	// The others can take at most 2 × 34, so nobody is left with fewer than 32.
	for _, m := range three {
		if got[m.id] < 32 {
			t.Errorf("%s owns %d of 100, want at least 32 (all: %v)", m.id, got[m.id], got)
		}
	}
	t.Logf("100 benchmark clusters over 3 equal members: plain rendezvous %v, bounded %v", plain, got)

	names = clusterNames(300)
	got = checkBounded(t, "300 clusters", three, names, assign(three, names, nil))
	t.Logf("300 clusters over 3 equal members: %v", got)
}

func TestAssignFollowsWeights(t *testing.T) {
	ms := []member{{"replica-a", 1}, {"replica-b", 1}, {"replica-c", 2}}
	for _, n := range []int{30, 300, 1000} {
		names := clusterNames(n)
		got := checkBounded(t, fmt.Sprintf("weights 1:1:2, %d clusters", n), ms, names, assign(ms, names, nil))
		// Each member's share is at least what the others' capacities leave it.
		for _, m := range ms {
			others := 0
			for _, o := range ms {
				if o.id != m.id {
					others += capacity(n, o.weight, 4)
				}
			}
			if low := n - others; got[m.id] < low {
				t.Errorf("weights 1:1:2, %d clusters: %s owns %d, want at least %d (all: %v)", n, m.id, got[m.id], low, got)
			}
		}
		if got["replica-c"] <= got["replica-a"] || got["replica-c"] <= got["replica-b"] {
			t.Errorf("weights 1:1:2, %d clusters: shares %v do not follow the weights", n, got)
		}
	}
}

// TestOneLeaseCannotClaimMostOfTheFleet: a member's weight counts at most the others' sum, so
// a peer Lease that claims MaxWeight against three replicas of weight 1 owns at most half of
// the fleet, even when the honest replicas hold every fence (sticky), and two replicas of
// weights 1 and MaxWeight share the fleet equally.
func TestOneLeaseCannotClaimMostOfTheFleet(t *testing.T) {
	members := []member{{"r1", 1}, {"r2", 1}, {"r3", 1}, {"forged", MaxWeight}}
	var names []string
	held := map[string]string{}
	for i := range 30 {
		n := fmt.Sprintf("cluster-%02d", i)
		names = append(names, n)
		held[n] = []string{"r1", "r2", "r3"}[i%3]
	}
	for _, h := range []map[string]string{held, nil} {
		a := assign(members, names, h)
		if won := a.counts()["forged"]; won*2 > len(names) {
			t.Errorf("held by the honest replicas %v: one peer Lease at weight %d wins %d of %d clusters from 3 replicas of weight 1", h != nil, MaxWeight, won, len(names))
		}
	}
	two := assign([]member{{"a", 1}, {"b", MaxWeight}}, names, nil).counts()
	if two["a"] != 15 || two["b"] != 15 {
		t.Errorf("weights 1 and %d over 30 clusters: %v, want 15 each", MaxWeight, two)
	}
	if got := normMembers([]member{{"a", 3}, {"b", 7}, {"c", 1}, {"d", 1}, {"e", 100}}); got[4].weight != 12 || got[1].weight != 7 {
		t.Errorf("bounded weights %v: want e capped at 12 (3+7+1+1), b kept at 7", got)
	}
}

// TestAssignExtremeWeightsOwnEverything: capacities sum to at least the number of clusters
// for every fleet size and weights from 1 to MaxWeight, so no cluster is left without an owner.
func TestAssignExtremeWeightsOwnEverything(t *testing.T) {
	sets := [][]member{
		{{"a", 1}},
		{{"a", MaxWeight}},
		{{"a", MaxWeight}, {"b", 1}},
		{{"a", 1}, {"b", 1}, {"c", MaxWeight}},
		{{"a", 3}, {"b", 7}, {"c", 1}, {"d", 1}, {"e", 100}},
	}
	for _, ms := range sets {
		for n := 1; n <= 60; n++ {
			names := clusterNames(n)
			checkBounded(t, fmt.Sprintf("%v, %d clusters", ms, n), ms, names, assign(ms, names, nil))
		}
	}
}

// TestAssignIsGreedyRendezvous: a cluster goes to a member it ranks below another only when
// that other member is full of clusters that rank higher for it. With room to spare everywhere
// the assignment is plain rendezvous hashing.
func TestAssignIsGreedyRendezvous(t *testing.T) {
	ms := []member{{"r1", 1}, {"r2", 2}, {"r3", 1}, {"r4", 1}}
	names := fleetNames()
	a := assign(ms, names, nil)
	got := a.counts()
	lowest := map[string]float64{} // each member's lowest score among the clusters it owns
	for _, name := range names {
		o := a.owner(name)
		s := score(o, name, weightOf(ms, o))
		if l, ok := lowest[o]; !ok || s < l {
			lowest[o] = s
		}
	}
	moved := 0
	for _, name := range names {
		o := a.owner(name)
		for _, m := range ms {
			if score(m.id, name, m.weight) <= score(o, name, weightOf(ms, o)) {
				continue
			}
			moved++
			if limit := capacity(len(names), m.weight, totalWeight(ms)); got[m.id] < limit {
				t.Errorf("%s went to %s although %s, which ranks it higher, has room (%d of %d)", name, o, m.id, got[m.id], limit)
			}
			if lowest[m.id] < score(m.id, name, m.weight) {
				t.Errorf("%s went to %s although %s, which ranks it higher, owns a cluster it ranks lower", name, o, m.id)
			}
		}
	}
	if moved == 0 {
		t.Error("no cluster left its favourite: the bound was not exercised")
	}

	// A fleet where every member's favourites fit in its capacity: then every cluster goes to
	// its favourite.
	three := equal("r1", "r2", "r3")
	names = nil
	for _, key := range slices.Sorted(maps.Keys(testFleets())) {
		fav := favouriteCounts(three, testFleets()[key])
		if fav["r1"] <= capacity(len(testFleets()[key]), 1, 3) && fav["r2"] <= capacity(len(testFleets()[key]), 1, 3) && fav["r3"] <= capacity(len(testFleets()[key]), 1, 3) {
			names = testFleets()[key]
			break
		}
	}
	if names == nil {
		t.Fatal("no test fleet whose favourites fit the capacities")
	}
	a = assign(three, names, nil)
	for _, name := range names {
		if o, f := a.owner(name), favourite(three, name); o != f {
			t.Errorf("%s went to %s, not its favourite %s, although every favourite has room", name, o, f)
		}
	}
}

func weightOf(ms []member, id string) int {
	for _, m := range ms {
		if m.id == id {
			return m.weight
		}
	}
	return 0
}

func favouriteCounts(ms []member, names []string) map[string]int {
	out := map[string]int{}
	for _, n := range names {
		out[favourite(ms, n)]++
	}
	return out
}

// TestAssignIsDeterministic: the assignment depends on the sets of members and clusters only,
// not on their order or on duplicates, so replicas that see the same fleet and peers agree.
func TestAssignIsDeterministic(t *testing.T) {
	ms := []member{{"r1", 1}, {"r2", 2}, {"r3", 1}, {"r4", 3}}
	names := fleetNames()
	want := assign(ms, names, nil)
	rnd := rand.New(rand.NewSource(1))
	for i := range 50 {
		m2 := append(slices.Clone(ms), ms[rnd.Intn(len(ms))]) // one member twice
		n2 := append(slices.Clone(names), names[rnd.Intn(len(names))], names[rnd.Intn(len(names))])
		rnd.Shuffle(len(m2), func(i, j int) { m2[i], m2[j] = m2[j], m2[i] })
		rnd.Shuffle(len(n2), func(i, j int) { n2[i], n2[j] = n2[j], n2[i] })
		got := assign(m2, n2, nil)
		if !maps.Equal(got.owners, want.owners) {
			t.Fatalf("shuffle %d: the assignment depends on the input order", i)
		}
		if !want.same(m2, n2, nil) {
			t.Fatalf("shuffle %d: same() does not recognise the same sets", i)
		}
	}
	if want.same(ms, names[1:], nil) || want.same(ms[1:], names, nil) || want.same([]member{{"r1", 1}, {"r2", 1}, {"r3", 1}, {"r4", 3}}, names, nil) {
		t.Error("same() reports a different fleet, member set or weight as the same")
	}
}

// moves counts the clusters of names whose owner differs between a and b: those moving from or
// to `changed` (the member removed or added), and the others.
func moves(a, b *assignment, names []string, changed string) (its, others int) {
	for _, name := range names {
		x, y := a.owner(name), b.owner(name)
		switch {
		case x == y:
		case x == changed || y == changed:
			its++
		default:
			others++
		}
	}
	return its, others
}

// The disruption bounds, measured over testFleets without holders and without slack (and stated in doc.go):
// removing one of 3 equal members moves its own clusters and at most maxOthersOnRemove others;
// adding a 4th moves to it what it owns and at most maxOthersOnAdd others; adding a cluster to
// a fleet of 100 over 3 members moves at most maxOnNewCluster existing ones.
const (
	maxOthersOnRemove = 9
	maxOthersOnAdd    = 8
	maxOnNewCluster   = 2
)

func TestAssignDisruption(t *testing.T) {
	three := equal("r1", "r2", "r3")
	four := equal("r1", "r2", "r3", "r4")
	var worstRemove, worstAdd, worstNew, zeroRemove, trials int
	fleets := testFleets()
	for _, key := range slices.Sorted(maps.Keys(fleets)) {
		names := fleets[key]
		before := assign(three, names, nil)
		for _, gone := range three {
			rest := slices.DeleteFunc(slices.Clone(three), func(m member) bool { return m.id == gone.id })
			after := assign(rest, names, nil)
			its, others := moves(before, after, names, gone.id)
			if its != before.counts()[gone.id] {
				t.Errorf("%s: removing %s moved %d of its %d clusters", key, gone.id, its, before.counts()[gone.id])
			}
			worstRemove = max(worstRemove, others)
			trials++
			if others == 0 {
				zeroRemove++
			}
			if others > maxOthersOnRemove {
				t.Errorf("%s: removing %s moved %d clusters it did not own, want at most %d", key, gone.id, others, maxOthersOnRemove)
			}
		}

		after := assign(four, names, nil)
		toNew, others := moves(before, after, names, "r4")
		if toNew != after.counts()["r4"] {
			t.Errorf("%s: %d clusters moved to or from r4, which owns %d", key, toNew, after.counts()["r4"])
		}
		n := len(names)
		if limit := capacity(n, 1, 4); toNew > limit || toNew < n-3*limit {
			t.Errorf("%s: adding r4 moved %d of %d clusters to it, want about a quarter (%d to %d)", key, toNew, n, n-3*limit, limit)
		}
		worstAdd = max(worstAdd, others)
		if others > maxOthersOnAdd {
			t.Errorf("%s: adding r4 moved %d clusters between the others, want at most %d", key, others, maxOthersOnAdd)
		}

		if n != 100 {
			continue
		}
		for j := range 5 {
			more := append(slices.Clone(names), fmt.Sprintf("new-%d", j))
			after := assign(three, more, nil)
			_, moved := moves(before, after, names, "")
			worstNew = max(worstNew, moved)
			if moved > maxOnNewCluster {
				t.Errorf("%s: adding cluster new-%d moved %d existing clusters, want at most %d", key, j, moved, maxOnNewCluster)
			}
		}
	}
	t.Logf("others moved: at most %d when one of 3 members goes (none in %d of %d cases), at most %d when a 4th comes; existing clusters moved by a new one: at most %d",
		worstRemove, zeroRemove, trials, worstAdd, worstNew)
}

func TestAssignEdges(t *testing.T) {
	names := clusterNames(10)
	none := assign(nil, names, nil)
	for _, name := range names {
		if o := none.owner(name); o != "" {
			t.Errorf("no members: %s has owner %q, want none", name, o)
		}
	}
	one := assign([]member{{"solo", 1}}, names, nil)
	for _, name := range names {
		if o := one.owner(name); o != "solo" {
			t.Errorf("one member: %s has owner %q, want solo", name, o)
		}
	}
	if o := one.owner("not-in-the-fleet"); o != "" {
		t.Errorf("a cluster outside the fleet has owner %q, want none", o)
	}
	if len(assign(equal("a", "b"), nil, nil).owners) != 0 {
		t.Error("an empty fleet has owners")
	}
	var nilAssignment *assignment
	if o := nilAssignment.owner("x"); o != "" {
		t.Errorf("nil assignment: owner %q, want none", o)
	}
	// Weights are 1..MaxWeight (Options.Validate, peerWeight); a weight below 1 would still
	// count as 1 rather than leave a member without room.
	if a, b := assign([]member{{"a", 0}, {"b", 1}}, names, nil), assign(equal("a", "b"), names, nil); !maps.Equal(a.owners, b.owners) {
		t.Error("a weight of 0 does not count as 1")
	}
	for _, c := range clusterNames(1000) {
		if u := unit("p", c); u <= 0 || u >= 1 {
			t.Fatalf("unit(%q) = %v, want in (0,1)", c, u)
		}
	}
}

// TestAssignmentIsReused: a reconcile pass reuses the last assignment while the members and
// the fleet are the same sets, and computes a new one when either changes.
func TestAssignmentIsReused(t *testing.T) {
	st := newLoopState(nil)
	names := fleetNames()
	a := st.assignmentFor(equal("r1", "r2", "r3"), names, nil)
	if b := st.assignmentFor(equal("r3", "r1", "r2"), slices.Clone(names), nil); b != a {
		t.Error("the same members in another order computed a new assignment")
	}
	if b := st.assignmentFor(equal("r1", "r2"), names, nil); b == a || b.owner(names[0]) == "r3" {
		t.Error("removing a member reused the old assignment")
	}
	if b := st.assignmentFor(equal("r1", "r2"), names[1:], nil); b.owner(names[0]) != "" {
		t.Error("a changed fleet reused the old assignment")
	}
}

// TestHandoffTargetFollowsTheAssignment: a held cluster goes to its owner in the assignment
// when that is another peer live for a LeaseDuration, and stays otherwise.
func TestHandoffTargetFollowsTheAssignment(t *testing.T) {
	o := validOptions()
	o.Identity = "r1"
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	peers := map[string]peerView{
		"r2": {ID: "r2", Weight: 1, Live: true, Since: now.Add(-c.ld)},
		"r3": {ID: "r3", Weight: 1, Live: true, Since: now.Add(-c.ld / 2)}, // live for less than a LeaseDuration
	}
	names := fleetNames()
	own := assign(c.members(peers, true), names, nil)
	for _, name := range names {
		want := own.owner(name)
		if want == "r1" || want == "r3" {
			want = ""
		}
		if got := c.handoffTarget(name, own, peers, now); got != want {
			t.Errorf("%s: handoff target %q, want %q (owner %q)", name, got, want, own.owner(name))
		}
	}
	if got := c.handoffTarget(names[0], nil, peers, now); got != "" {
		t.Errorf("no assignment: handoff target %q, want none", got)
	}
}

// BenchmarkAssign: 10,000 clusters over 5 members, what one reconcile pass computes when the
// fleet or the peers changed.
func BenchmarkAssign(b *testing.B) {
	names := make([]string, 10000)
	for i := range names {
		names[i] = fmt.Sprintf("cluster-%05d", i)
	}
	ms := equal("r1", "r2", "r3", "r4", "r5")
	for b.Loop() {
		assign(ms, names, nil)
	}
}

// TestAssignIsSticky: with the fences' holders, the assignment moves only what it must. Over
// every test fleet: the holders of an assignment are its own fixed point; removing a member
// moves its clusters and no other; adding one moves clusters only off members over their new
// capacity, exactly as many as they are over, and only to members that were under it; a
// holder that is not a member holds nothing in the assignment; and the bounds hold throughout.
func TestAssignIsSticky(t *testing.T) {
	three, four := equal("r1", "r2", "r3"), equal("r1", "r2", "r3", "r4")
	for fleet, names := range testFleets() {
		a := assign(three, names, nil)
		if b := assign(three, names, a.owners); !maps.Equal(a.owners, b.owners) {
			t.Fatalf("%s: the holders of an assignment are not its fixed point", fleet)
		}
		for _, gone := range three {
			rest := slices.DeleteFunc(slices.Clone(three), func(m member) bool { return m.id == gone.id })
			b := assign(rest, names, a.owners)
			checkBounded(t, fleet+" without "+gone.id, rest, names, b)
			for _, name := range names {
				if was := a.owner(name); was != gone.id && b.owner(name) != was {
					t.Fatalf("%s: removing %s moved %s from %s to %s", fleet, gone.id, name, was, b.owner(name))
				}
			}
		}
		b := assign(four, names, a.owners)
		checkBounded(t, fleet+" with r4", four, names, b)
		limit := capacity(len(names), 1, 4)
		over, moved := 0, 0
		for _, n := range a.counts() {
			over += max(0, n-limit)
		}
		for _, name := range names {
			if was, now := a.owner(name), b.owner(name); was != now {
				moved++
				if a.counts()[was] <= limit || (now != "r4" && a.counts()[now] >= limit) {
					t.Fatalf("%s: adding r4 moved %s from %s (held %d, capacity %d) to %s", fleet, name, was, a.counts()[was], limit, now)
				}
			}
		}
		if moved != over {
			t.Errorf("%s: adding r4 moved %d clusters, want the %d the others held over their capacity %d", fleet, moved, over, limit)
		}
		ghost := maps.Clone(a.owners)
		for name := range ghost {
			ghost[name] = "gone"
		}
		if c := assign(three, names, ghost); !maps.Equal(c.owners, a.owners) {
			t.Errorf("%s: holders that are not members changed the assignment", fleet)
		}
	}
}
