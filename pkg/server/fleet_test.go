package server

import (
	"slices"
	"testing"

	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/watchcache"
)

// staticFleet is a Fleet whose owners a test sets.
type staticFleet struct {
	owners []shard.Owner
	change chan struct{}
}

func (f *staticFleet) Identity() string            { return "me" }
func (f *staticFleet) Owners() []shard.Owner       { return f.owners }
func (f *staticFleet) WaitChange() <-chan struct{} { return f.change }

func TestPlanAndFleetTokens(t *testing.T) {
	fl := &staticFleet{owners: []shard.Owner{
		{Cluster: "a", Holder: "me", Self: true, Live: true},
		{Cluster: "b", Holder: "p2", URL: "http://p2/", Live: true},
		{Cluster: "c", Holder: "p2", URL: "http://p2", Live: true},
		{Cluster: "d", Holder: "p3", URL: "http://p3", Live: false},
		{Cluster: "e"},
	}}
	s := &Server{opts: Options{Fleet: fl}}
	pl := s.plan(nil)
	if len(pl.parts) != 2 || !pl.parts[0].self || pl.parts[1].peer != "p2" || !slices.Equal(pl.parts[1].clusters, []string{"b", "c"}) || pl.parts[1].url != "http://p2" {
		t.Fatalf("parts: %+v", pl.parts)
	}
	if len(pl.down) != 2 || pl.down["d"] == "" || pl.down["e"] == "" || pl.local() {
		t.Fatalf("down: %v, local %v", pl.down, pl.local())
	}
	if only := s.plan(func(c string) bool { return c == "a" }); !only.local() {
		t.Fatalf("a plan of this replica's cluster only must be local: %+v", only)
	}

	// A token resumes the same plan; once a cluster moves, it does not.
	tok := watchcache.Position{Parts: map[string]watchcache.PartPosition{}}
	for _, p := range pl.parts {
		tok.Parts[p.peer] = watchcache.PartPosition{RV: "rv-" + p.peer, Set: p.set()}
	}
	parsed, ok := parseMerged(tok.String())
	if !ok || resumable(parsed, pl) != nil {
		t.Fatalf("a token of the plan does not resume it: %v %v", ok, resumable(parsed, pl))
	}
	if rv, ok := partPosition(parsed, pl.parts[1]); !ok || rv != "rv-p2" {
		t.Fatalf("position of p2: %q %v", rv, ok)
	}
	fl.owners[2] = shard.Owner{Cluster: "c", Holder: "me", Self: true, Live: true}
	if why := s.moved(pl); why == "" {
		t.Fatal("c moved from p2 to me: moved says nothing")
	}
	if err := resumable(parsed, s.plan(nil)); err == nil {
		t.Fatal("a token from before c moved resumes the new plan")
	}
	if _, ok := parseMerged(watchcache.Position{Epoch: "x", Seq: 3}.String()); ok {
		t.Fatal("a single replica's token parsed as a fleet token")
	}
}
