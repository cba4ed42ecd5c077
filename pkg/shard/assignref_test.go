package shard

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// assignBySort is the assignment as first written: every (cluster, member) pair scored and
// sorted in one slice, then taken greedily. assign must give exactly its owners for any input
// whose member IDs are not empty (a peer's ID never is: ValidateIdentity), so that replicas
// running either version during a rolling update compute the same owners.
func assignBySort(members []member, clusters []string, held map[string]string) *assignment {
	ms, names := normMembers(members), normNames(clusters)
	a := &assignment{members: ms, names: names, held: maps.Clone(held), owners: make(map[string]string, len(names))}
	if len(ms) == 0 || len(names) == 0 {
		return a
	}
	total := 0
	for _, m := range ms {
		total += m.weight
	}
	room := make([]int, len(ms))
	for i, m := range ms {
		room[i] = capacity(len(names), m.weight, total)
	}
	type pair struct {
		score  float64
		m, c   int32 // indexes into ms and names: their order is ID and name order
		sticky bool  // m holds c now
	}
	pairs := make([]pair, 0, len(ms)*len(names))
	for c, name := range names {
		h := held[name]
		for m, mb := range ms {
			pairs = append(pairs, pair{score(mb.id, name, mb.weight), int32(m), int32(c), h == mb.id})
		}
	}
	slices.SortFunc(pairs, func(x, y pair) int {
		if x.sticky != y.sticky {
			if x.sticky {
				return -1 // holders keep what they hold first
			}
			return 1
		}
		if x.score != y.score {
			return cmp.Compare(y.score, x.score) // descending
		}
		if x.m != y.m {
			return cmp.Compare(x.m, y.m)
		}
		return cmp.Compare(x.c, y.c)
	})
	owner := make([]int32, len(names))
	for i := range owner {
		owner[i] = -1
	}
	left := len(names)
	for _, p := range pairs {
		if left == 0 {
			break
		}
		if owner[p.c] >= 0 || room[p.m] == 0 {
			continue
		}
		owner[p.c] = p.m
		room[p.m]--
		left--
	}
	for c, m := range owner {
		a.owners[names[c]] = ms[m].id // m ≥ 0: the capacities sum to at least len(names)
	}
	return a
}

// TestAssignMatchesTheSortedDefinition: over random fleets, members (weights 1 to 5, some
// repeated), holders (members, strangers, free fences) and scores reused across holders, the
// merged assignment equals the one that sorts every pair.
func TestAssignMatchesTheSortedDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 1))
	for round := range 300 {
		n, r := 1+rng.IntN(400), 1+rng.IntN(12)
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("c-%d-%d", round, rng.IntN(2*n)) // duplicates on purpose
		}
		members := make([]member, r)
		for i := range members {
			members[i] = member{id: fmt.Sprintf("r%d", rng.IntN(r+2)), weight: 1 + rng.IntN(5)}
		}
		sc := newScores(normMembers(members), normNames(names))
		for range 3 {
			held := map[string]string{}
			for _, name := range names {
				switch rng.IntN(4) {
				case 0: // free
				case 1:
					held[name] = "stranger"
				default:
					held[name] = members[rng.IntN(r)].id
				}
			}
			want := assignBySort(members, names, held)
			for _, got := range []*assignment{assign(members, names, held), sc.assign(held)} {
				if !maps.Equal(got.owners, want.owners) {
					t.Fatalf("round %d (%d names, %d members): owners differ from the sorted definition", round, n, r)
				}
			}
		}
	}
}

// BenchmarkAssignBySort is BenchmarkAssignAtWidth's figure for the sorted definition:
//
//	go test -run '^$' -bench 'AssignAtWidth|AssignBySort|AssignHoldersOnly' -benchtime 5x -count 5 ./pkg/shard/
func BenchmarkAssignBySort(b *testing.B) {
	names, members := widthFleet(10000), widthMembers(30)
	held := heldAs(assign(members, names, nil))
	for b.Loop() {
		assignBySort(members, names, held)
	}
}

// BenchmarkAssignHoldersOnly is what a reconcile pays when only fences changed: the scores
// kept, the holders new.
func BenchmarkAssignHoldersOnly(b *testing.B) {
	names, members := widthFleet(10000), widthMembers(30)
	held := heldAs(assign(members, names, nil))
	sc := newScores(normMembers(members), normNames(names))
	for b.Loop() {
		sc.assign(held)
	}
}
