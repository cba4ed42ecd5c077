package shard

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/multicache/multicache/pkg/clusterset"
)

// TestSelfFencing: a replica that cannot renew its peer Lease stops offering every cluster
// 2/3 of a LeaseDuration after its last successful renewal, with Changes firing, and offers
// them again once a renewal succeeds.
func TestSelfFencing(t *testing.T) {
	cs := fake.NewClientset()
	var failing atomic.Bool
	cs.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if u, ok := a.(k8stesting.UpdateAction); ok && failing.Load() {
			if l, ok := u.GetObject().(interface{ GetName() string }); ok && l.GetName() == peerLeaseName("solo") {
				return true, nil, errors.New("injected: management cluster unreachable")
			}
		}
		return false, nil, nil
	})
	clk := testingclock.NewFakeClock(time.Now())
	const ld = 3 * time.Second
	c, err := New(Options{
		Client: cs, Namespace: "ns", Identity: "solo", AdvertiseURL: "http://solo:1",
		LeaseDuration: ld, Clock: clk, Logger: zaptest.NewLogger(t),
		Source: clusterset.Static{{Name: "a"}, {Name: "b"}, {Name: "c"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	changes := c.Changes(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		for { // the graceful part waits on the fake clock
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
				return
			case <-time.After(10 * time.Millisecond):
				clk.Step(fastPoll)
			}
		}
	}()

	// until steps the fake clock by 50ms at a time (letting the goroutines react in between)
	// until Load offers want clusters, and returns the fake time that took.
	until := func(want int, limit time.Duration) time.Duration {
		t.Helper()
		start := clk.Now()
		for {
			time.Sleep(5 * time.Millisecond)
			if cfgs, _ := c.Load(); len(cfgs) == want {
				return clk.Since(start)
			}
			if clk.Since(start) > limit {
				t.Fatalf("Load does not offer %d clusters after %s", want, limit)
			}
			clk.Step(50 * time.Millisecond)
		}
	}
	drain := func() {
		for {
			select {
			case <-changes:
			default:
				return
			}
		}
	}
	// fired waits for Changes. Load judges the fence by the fake clock, and until stops it
	// there; the goroutine that tells Changes may have armed its timer a moment past that (a
	// timer armed late, while the clock moved on). So the clock moves on by a millisecond at a
	// time while fired waits, at most 100ms.
	fired := func(what string) {
		t.Helper()
		realDeadline := time.After(5 * time.Second)
		for stepped := time.Duration(0); ; {
			select {
			case <-changes:
				return
			case <-realDeadline:
				t.Fatalf("Changes did not fire: %s (the clock moved on %s)", what, stepped)
			case <-time.After(10 * time.Millisecond):
				if stepped < 100*time.Millisecond {
					clk.Step(time.Millisecond)
					stepped += time.Millisecond
				}
			}
		}
	}

	deadline := time.Now().Add(10 * time.Second)
	for cfgs, _ := c.Load(); len(cfgs) != 3; cfgs, _ = c.Load() { // alone: it takes every fence
		if time.Now().After(deadline) {
			t.Fatalf("Load offers %d clusters, want 3", len(cfgs))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := c.Owners(); len(got) != 3 || !got[0].Self || !got[0].Live || got[0].URL != "http://solo:1" {
		t.Fatalf("Owners: %+v", got)
	}
	if err := c.Ready(); err != nil {
		t.Errorf("Ready while live and coordinated: %v", err)
	}
	drain()
	failing.Store(true) // the last successful renewal was at most now
	if took := until(0, ld); took > 2*ld/3 {
		t.Errorf("self-fenced %s after renewals began to fail, want at most 2/3 of %s", took, ld)
	}
	fired("self-fencing")
	if p := c.Peers(); len(p) != 1 || !p[0].Self || p[0].Live {
		t.Errorf("Peers while fenced: %+v", p)
	}
	// Fenced, it runs nothing: not ready, and its clusters stay in the fleet, so that the
	// Registry stops them as handoffs (no deletes reach any client).
	if err := c.Ready(); err == nil || !strings.Contains(err.Error(), "self-fenced") {
		t.Errorf("Ready while fenced: %v, want a self-fenced error", err)
	}
	if len(c.Owners()) != 3 {
		t.Errorf("Owners while fenced: %+v, want the 3 clusters", c.Owners())
	}
	for _, o := range c.Owners() {
		if !c.Retains(o.Cluster) {
			t.Errorf("Retains(%q) while fenced = false: its objects would leave as deletes", o.Cluster)
		}
	}
	if c.Retains("not-in-the-fleet") {
		t.Error("Retains a cluster that is not in the fleet")
	}
	drain()
	failing.Store(false)
	until(3, ld) // the next renewal succeeds
	fired("the fence lifting")
}
