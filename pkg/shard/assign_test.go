package shard

import (
	"fmt"
	"math"
	"testing"
)

func clusterNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("cluster-%03d", i)
	}
	return out
}

func shares(members []member, clusters []string) map[string]int {
	out := map[string]int{}
	for _, c := range clusters {
		out[owner(members, c)]++
	}
	return out
}

func TestHRWSpreadsEvenly(t *testing.T) {
	members := []member{{"replica-a", 1}, {"replica-b", 1}, {"replica-c", 1}}
	got := shares(members, clusterNames(300))
	for _, m := range members {
		if n := got[m.id]; n < 70 || n > 130 {
			t.Errorf("%s owns %d of 300 clusters, want 100±30 (all: %v)", m.id, n, got)
		}
	}
}

func TestHRWFollowsWeights(t *testing.T) {
	members := []member{{"replica-a", 1}, {"replica-b", 2}}
	got := shares(members, clusterNames(1000))
	ratio := float64(got["replica-b"]) / float64(got["replica-a"])
	if math.Abs(ratio-2)/2 > 0.25 {
		t.Errorf("weights 1:2 gave shares %v, ratio %.2f, want 2 within 25%%", got, ratio)
	}
}

func TestHRWRemovingAPeerMovesOnlyItsClusters(t *testing.T) {
	all := []member{{"replica-a", 1}, {"replica-b", 2}, {"replica-c", 1}}
	for removed := range all {
		rest := append(append([]member(nil), all[:removed]...), all[removed+1:]...)
		for _, c := range clusterNames(300) {
			before, after := owner(all, c), owner(rest, c)
			if before != all[removed].id && after != before {
				t.Fatalf("removing %s moved %s from %s to %s", all[removed].id, c, before, after)
			}
			if after == all[removed].id {
				t.Fatalf("%s still owned by removed %s", c, after)
			}
		}
	}
}

func TestHRWAddingAPeerMovesClustersOnlyToIt(t *testing.T) {
	before := []member{{"replica-a", 1}, {"replica-b", 1}, {"replica-c", 1}}
	after := append(append([]member(nil), before...), member{"replica-d", 1})
	moved := 0
	for _, c := range clusterNames(300) {
		b, a := owner(before, c), owner(after, c)
		if a != b {
			if a != "replica-d" {
				t.Fatalf("adding replica-d moved %s from %s to %s", c, b, a)
			}
			moved++
		}
	}
	if moved < 50 || moved > 100 { // a quarter of 300 is 75
		t.Errorf("adding a fourth peer moved %d of 300 clusters, want about 75", moved)
	}
}

func TestHRWEdges(t *testing.T) {
	if got := owner(nil, "x"); got != "" {
		t.Errorf("no members: owner %q, want none", got)
	}
	// Same ID twice: the tie goes to the smaller ID, which is the same; order does not matter.
	a := owner([]member{{"b", 1}, {"a", 1}}, "x")
	b := owner([]member{{"a", 1}, {"b", 1}}, "x")
	if a != b {
		t.Errorf("owner depends on member order: %q vs %q", a, b)
	}
	for _, c := range clusterNames(1000) {
		if u := unit("p", c); u <= 0 || u >= 1 {
			t.Fatalf("unit(%q) = %v, want in (0,1)", c, u)
		}
	}
}
