package fanout

import (
	"fmt"
	"math/rand/v2"
	"reflect"
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
			n := rnd.IntN(12)
			if n == 0 && rnd.IntN(2) == 0 {
				continue // nil
			}
			l := make([]api.ClusterFreshness, n)
			for k := range l {
				// Error tells entries of one name apart: which list and place it came from.
				l[k] = api.ClusterFreshness{Name: fmt.Sprintf("c%02d", rnd.IntN(16)), Error: fmt.Sprintf("list %d item %d", i, k)}
			}
			if rnd.IntN(3) > 0 {
				sort.SliceStable(l, func(a, b int) bool { return l[a].Name < l[b].Name })
			} else {
				unsorted++
			}
			lists[i] = l
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
	}
	if unsorted == 0 {
		t.Fatal("no unsorted list was tried")
	}
}
