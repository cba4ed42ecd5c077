package fanout

import (
	"fmt"
	"slices"
	"testing"

	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/watchcache"
)

// TestPlanAndFleetPositions: a plan splits the fleet among its owners (a down owner's clusters
// and an unowned one down); a merged position resumes the same plan only, and a move changes
// the plan in words.
func TestPlanAndFleetPositions(t *testing.T) {
	owners := []shard.Owner{
		{Cluster: "a", Holder: "me", Self: true, Live: true},
		{Cluster: "b", Holder: "p2", URL: "http://p2/", Live: true},
		{Cluster: "c", Holder: "p2", URL: "http://p2", Live: true},
		{Cluster: "d", Holder: "p3", URL: "http://p3", Live: false},
		{Cluster: "e"},
	}
	pl := planOf(owners, nil)
	if len(pl.parts) != 2 || !pl.parts[0].self || pl.parts[1].peer != "p2" || !slices.Equal(pl.parts[1].clusters, []string{"b", "c"}) || pl.parts[1].url != "http://p2" {
		t.Fatalf("parts: %+v", pl.parts)
	}
	if len(pl.down) != 2 || pl.down["d"] == "" || pl.down["e"] == "" || pl.local() {
		t.Fatalf("down: %v, local %v", pl.down, pl.local())
	}
	if only := planOf(owners, func(c string) bool { return c == "a" }); !only.local() {
		t.Fatalf("a plan of this replica's cluster only must be local: %+v", only)
	}

	// A position resumes the same plan; once a cluster moves, it does not.
	tok := watchcache.Position{Parts: map[string]watchcache.PartPosition{}}
	for _, p := range pl.parts {
		tok.Parts[p.peer] = watchcache.PartPosition{RV: "rv-" + p.peer, Set: p.set()}
	}
	parsed, ok := parseMerged(tok.String())
	if !ok || resumable(parsed, pl) != nil {
		t.Fatalf("a position of the plan does not resume it: %v %v", ok, resumable(parsed, pl))
	}
	if rv, ok := partPosition(parsed, pl.parts[1]); !ok || rv != "rv-p2" {
		t.Fatalf("position of p2: %q %v", rv, ok)
	}
	moved := slices.Clone(owners)
	moved[2] = shard.Owner{Cluster: "c", Holder: "me", Self: true, Live: true}
	if why := changeFrom(pl, planOf(moved, nil)); why == "" {
		t.Fatal("c moved from p2 to me: changeFrom says nothing")
	}
	if err := resumable(parsed, planOf(moved, nil)); err == nil {
		t.Fatal("a position from before c moved resumes the new plan")
	}
	// The same owners, but one down, one back, one at a new address: each a change.
	if why := changeFrom(pl, planOf(owners, nil)); why != "" {
		t.Fatalf("nothing changed: changeFrom says %q", why)
	}
	for name, change := range map[string]func(o []shard.Owner){
		"p2 went down":                func(o []shard.Owner) { o[1].Live, o[2].Live = false, false },
		"b went down, c did not":      func(o []shard.Owner) { o[1].Live = false },
		"p3 came back":                func(o []shard.Owner) { o[3].Live = true },
		"p2 answers at a new address": func(o []shard.Owner) { o[1].URL, o[2].URL = "http://p2-new", "http://p2-new" },
	} {
		changed := slices.Clone(owners)
		change(changed)
		if why := changeFrom(pl, planOf(changed, nil)); why == "" {
			t.Errorf("%s: changeFrom says nothing", name)
		}
	}
	if _, ok := parseMerged(watchcache.Position{Epoch: "x", Seq: 3}.String()); ok {
		t.Fatal("a single replica's position parsed as a fleet position")
	}
}

// BenchmarkGuardWhyUnchanged: every fleet watch asks its guard why the fleet changed on every
// change of owners (a move is many), over 1,000 clusters on three replicas, one down; here its
// own plan has not changed.
//
//	go test -run '^$' -bench GuardWhy -benchmem ./pkg/storage/fanout/
func BenchmarkGuardWhyUnchanged(b *testing.B) {
	var owners []shard.Owner
	for i := range 1000 {
		o := shard.Owner{Cluster: fmt.Sprintf("c%03d", i), Holder: []string{"me", "p2", "p3"}[i%3], Live: i != 7}
		o.Self, o.URL = o.Holder == "me", "http://"+o.Holder
		owners = append(owners, o)
	}
	g := &guard{fleet: &fakeFleet{owners: owners}, was: planOf(owners, nil)}
	for range b.N {
		if why := g.Why(); why != "" {
			b.Fatal(why)
		}
	}
}
