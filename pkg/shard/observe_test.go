package shard

import (
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"
)

// TestFenceGenerationCountsEveryFenceChange: a pass rebuilds its view of the fences when the
// observer's fence generation moves, so every event that changes the set of fences must move
// it: a fence added, updated, deleted (also as a DeletedFinalStateUnknown), and a fence
// relabelled into something else. A peer's renewal does not.
func TestFenceGenerationCountsEveryFenceChange(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	o := newObserver(clk, 15*time.Second, "r1", func() {})
	h := o.handler()
	lease := func(name, kind, rv string) *coordv1.Lease {
		return &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv, Labels: map[string]string{labelLease: kind}}}
	}
	fence, peer := lease(fenceLeaseName("c1"), kindFence, "1"), lease(peerLeaseName("r2"), kindPeer, "2")
	for _, c := range []struct {
		what  string
		event func()
		moves bool
	}{
		{"a fence added", func() { h.OnAdd(fence, false) }, true},
		{"a fence updated", func() { h.OnUpdate(fence, lease(fence.Name, kindFence, "3")) }, true},
		{"a peer Lease added", func() { h.OnAdd(peer, false) }, false},
		{"a peer renewed", func() { h.OnUpdate(peer, lease(peer.Name, kindPeer, "4")) }, false},
		{"a fence relabelled as a peer Lease", func() { h.OnUpdate(fence, lease(fence.Name, kindPeer, "5")) }, true},
		{"a fence deleted", func() { h.OnDelete(fence) }, true},
		{"a fence deleted, its final state unknown", func() {
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/" + fence.Name, Obj: fence})
		}, true},
	} {
		before := o.fenceGeneration()
		c.event()
		if moved := o.fenceGeneration() != before; moved != c.moves {
			t.Errorf("%s: the fence generation moved %v, want %v", c.what, moved, c.moves)
		}
	}
}
