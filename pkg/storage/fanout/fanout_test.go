package fanout

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/multicache/multicache/pkg/api"
)

// TestMergeFreshnessIsTheFirstOfEachName: over random lists (sorted or not, with names twice
// in one list and across lists, empty and nil), the merge is what its definition says: every
// name once, in name order, each from the first list and place that names it.
func TestMergeFreshnessIsTheFirstOfEachName(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 11))
	definition := func(lists ...[]api.ClusterFreshness) []api.ClusterFreshness {
		var out []api.ClusterFreshness
		seen := map[string]bool{}
		for _, l := range lists {
			for _, f := range l {
				if !seen[f.Name] {
					seen[f.Name] = true
					out = append(out, f)
				}
			}
		}
		sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
		return out
	}
	unsorted := 0
	for round := range 2000 {
		lists := make([][]api.ClusterFreshness, rnd.IntN(5))
		for i := range lists {
			// Up to 40: slices sorts 12 or fewer by insertion, which is stable, and would
			// hide an unstable sort of a list that names a cluster twice.
			n := rnd.IntN(41)
			if n == 0 && rnd.IntN(2) == 0 {
				continue // nil
			}
			l := make([]api.ClusterFreshness, n)
			for k := range l {
				// Error tells entries of one name apart: which list and place it came from.
				l[k] = api.ClusterFreshness{Name: fmt.Sprintf("c%02d", rnd.IntN(24)), Error: fmt.Sprintf("list %d item %d", i, k)}
			}
			if rnd.IntN(3) > 0 {
				sort.SliceStable(l, func(a, b int) bool { return l[a].Name < l[b].Name })
			} else {
				unsorted++
			}
			lists[i] = l
		}
		kept := make([][]api.ClusterFreshness, len(lists))
		for i, l := range lists {
			kept[i] = slices.Clone(l)
		}
		// As the fan-out calls it: the merge so far with each list in turn.
		var folded []api.ClusterFreshness
		for _, l := range lists {
			folded = mergeFreshness(folded, l)
		}
		want := definition(lists...)
		if got := mergeFreshness(lists...); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: merge of %v:\n got %v\nwant %v", round, lists, got, want)
		}
		if !reflect.DeepEqual(folded, want) {
			t.Fatalf("round %d: folded merge of %v:\n got %v\nwant %v", round, lists, folded, want)
		}
		if !reflect.DeepEqual(lists, kept) {
			t.Fatalf("round %d: the merge changed its input lists", round)
		}
	}
	if unsorted == 0 {
		t.Fatal("no unsorted list was tried")
	}
}
