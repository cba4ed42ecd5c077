package daemon

import (
	"context"
	"math"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// gcPercent reads the collector's percent without changing it.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func TestRaiseGCForSync(t *testing.T) {
	t.Setenv("GOGC", "")
	before, limit := gcPercent(), debug.SetMemoryLimit(-1)
	if before < 0 {
		t.Skip("the collector is off in this process (GOGC=off)")
	}
	restore := raiseGCForSync(400, "test", zap.NewNop())
	if got := gcPercent(); got != 400 {
		t.Errorf("during the sync: GC percent %d, want 400", got)
	}
	if l := debug.SetMemoryLimit(-1); l <= 0 || l == math.MaxInt64 || (limit != math.MaxInt64 && l != limit/4) {
		t.Errorf("during the sync: memory limit %d (was %d): want a quarter of the one in force, or of the machine's memory", l, limit)
	}
	restore()
	restore() // a second call changes nothing
	if got := gcPercent(); got != before {
		t.Errorf("after the sync: GC percent %d, want %d again", got, before)
	}
	if l := debug.SetMemoryLimit(-1); l != limit {
		t.Errorf("after the sync: memory limit %d, want %d again", l, limit)
	}

	// Off: the collector stops, under the same limit, and both come back.
	restore = raiseGCForSync(-1, "test", zap.NewNop())
	if got := gcPercent(); got != -1 {
		t.Errorf("off during the sync: GC percent %d, want -1", got)
	}
	if l := debug.SetMemoryLimit(-1); l <= 0 || l == math.MaxInt64 || (limit != math.MaxInt64 && l != limit/4) {
		t.Errorf("off during the sync: memory limit %d (was %d): want a quarter of the one in force, or of the machine's memory", l, limit)
	}
	restore()
	if got, l := gcPercent(), debug.SetMemoryLimit(-1); got != before || l != limit {
		t.Errorf("after an off sync: GC percent %d, limit %d; want %d and %d again", got, l, before, limit)
	}

	for _, pct := range []int{0, 100} {
		raiseGCForSync(pct, "test", zap.NewNop())()
		if got := gcPercent(); got != before {
			t.Errorf("pct %d: GC percent %d, want it left at %d", pct, got, before)
		}
	}
	t.Setenv("GOGC", "150")
	restore = raiseGCForSync(400, "test", zap.NewNop())
	if got := gcPercent(); got != before {
		t.Errorf("with GOGC set: GC percent %d, want it left at %d", got, before)
	}
	restore()
}

// TestSetGCPercent: gcPercent sets the collector's steady percent, the sync's raise returns to
// it, and 0 or an operator's GOGC leaves the collector as it was.
func TestSetGCPercent(t *testing.T) {
	before := gcPercent()
	if before < 0 {
		t.Skip("the collector is off in this process (GOGC=off)")
	}
	defer debug.SetGCPercent(before)
	t.Setenv("GOGC", "")
	setGCPercent(0, zap.NewNop())
	if got := gcPercent(); got != before {
		t.Errorf("gcPercent 0: GC percent %d, want it left at %d", got, before)
	}
	setGCPercent(50, zap.NewNop())
	if got := gcPercent(); got != 50 {
		t.Fatalf("gcPercent 50: GC percent %d, want 50", got)
	}
	raiseGCForSync(-1, "test", zap.NewNop())()
	if got := gcPercent(); got != 50 {
		t.Errorf("after the sync's raise: GC percent %d, want the steady 50 again", got)
	}
	// Above the steady percent, a sync's percent of 100 or less is a raise too.
	restore := raiseGCForSync(80, "test", zap.NewNop())
	if got := gcPercent(); got != 80 {
		t.Errorf("steady 50, sync 80: GC percent %d during the sync, want 80", got)
	}
	restore()
	if got := gcPercent(); got != 50 {
		t.Errorf("steady 50, after a sync at 80: GC percent %d, want 50 again", got)
	}
	// At or below it, none: a sync never runs below the steady percent.
	setGCPercent(200, zap.NewNop())
	for _, pct := range []int{150, 200} {
		restore = raiseGCForSync(pct, "test", zap.NewNop())
		if got := gcPercent(); got != 200 {
			t.Errorf("steady 200, sync %d: GC percent %d during the sync, want 200 left alone", pct, got)
		}
		restore()
	}
	debug.SetGCPercent(before)
	t.Setenv("GOGC", "80")
	setGCPercent(50, zap.NewNop())
	if got := gcPercent(); got != before {
		t.Errorf("GOGC set: GC percent %d, want the operator's (%d) left alone", got, before)
	}
}

// TestGCPercentNow: the runtime's percent as the collector has it, -1 when it is off.
func TestGCPercentNow(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	for _, pct := range []int{70, 100, 350, -1} {
		debug.SetGCPercent(pct)
		if got, ok := gcPercentNow(); ok && got != pct {
			t.Errorf("set to %d: read %d", pct, got)
		} else if !ok {
			t.Skip("this runtime does not measure /gc/gogc:percent")
		}
	}
}

// TestRaiseGCForTakeovers: the collector is raised once more clusters are owned than warm at
// once, stays raised while any warms, and comes back when none warms or waits, or when the
// context ends.
func TestRaiseGCForTakeovers(t *testing.T) {
	t.Setenv("GOGC", "")
	before, limit := gcPercent(), debug.SetMemoryLimit(-1)
	if before < 0 || before == 400 {
		t.Skipf("the collector is at %d in this process", before)
	}
	var mu sync.Mutex
	warming, queued := 0, 0
	set := func(w, q int) {
		mu.Lock()
		warming, queued = w, q
		mu.Unlock()
	}
	warmups := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return warming, queued
	}
	waitGC := func(what string, want int) {
		t.Helper()
		deadline := time.Now().Add(10 * takeoverPoll)
		for gcPercent() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: GC percent %d, want %d", what, gcPercent(), want)
			}
			time.Sleep(takeoverPoll / 10)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		raiseGCForTakeovers(ctx, warmups, 400, zap.NewNop())
	}()
	t.Cleanup(func() { cancel(); <-done }) // the collector as it was, even after a failure

	set(4, 0) // as many warming as there are slots: not a takeover
	time.Sleep(3 * takeoverPoll)
	if got := gcPercent(); got != before {
		t.Errorf("4 warming, none queued: GC percent %d, want %d (no raise)", got, before)
	}
	set(4, 120)
	waitGC("4 warming, 120 queued", 400)
	if l := debug.SetMemoryLimit(-1); l == math.MaxInt64 || (limit != math.MaxInt64 && l != limit/4) {
		t.Errorf("during a takeover: memory limit %d (was %d): want a quarter of the one in force, or of the machine's memory", l, limit)
	}
	set(3, 0) // the last ones warm: still raised
	time.Sleep(3 * takeoverPoll)
	if got := gcPercent(); got != 400 {
		t.Errorf("3 warming, none queued, after a takeover: GC percent %d, want 400 until they are synced", got)
	}
	set(0, 0)
	waitGC("all synced", before)
	if l := debug.SetMemoryLimit(-1); l != limit {
		t.Errorf("after a takeover: memory limit %d, want %d again", l, limit)
	}
	set(2, 9) // a second takeover, ended by the context
	waitGC("a second takeover", 400)
	cancel()
	<-done
	if got, l := gcPercent(), debug.SetMemoryLimit(-1); got != before || l != limit {
		t.Errorf("after the context ended: GC percent %d, limit %d; want %d and %d again", got, l, before, limit)
	}
}

// TestRaiseGCForSyncChecksTheLiveHeapFirst: a raise that starts over a live heap it does not
// fit in its budget (a takeover over a large cache) changes nothing, not even for a moment.
func TestRaiseGCForSyncChecksTheLiveHeapFirst(t *testing.T) {
	t.Setenv("GOGC", "")
	before, limit := gcPercent(), debug.SetMemoryLimit(-1)
	if before < 0 {
		t.Skip("the collector is off in this process (GOGC=off)")
	}
	budget, ok := syncMemoryBudget()
	if !ok {
		t.Skip("no measure of this machine's memory")
	}
	prev := liveHeap
	t.Cleanup(func() { liveHeap = prev })
	liveHeap = func() (uint64, bool) { return uint64(budget)/2 + 1, true } // off fits up to half
	restore := raiseGCForSync(-1, "test", zap.NewNop())
	if got, l := gcPercent(), debug.SetMemoryLimit(-1); got != before || l != limit {
		t.Errorf("over a live heap above half the budget: GC percent %d, limit %d; want %d and %d untouched", got, l, before, limit)
	}
	restore()
	liveHeap = func() (uint64, bool) { return uint64(budget) / 4, true }
	restore = raiseGCForSync(-1, "test", zap.NewNop())
	if got := gcPercent(); got != -1 {
		t.Errorf("over a live heap of a quarter of the budget: GC percent %d, want -1", got)
	}
	restore()
	if got, l := gcPercent(), debug.SetMemoryLimit(-1); got != before || l != limit {
		t.Errorf("after: GC percent %d, limit %d; want %d and %d again", got, l, before, limit)
	}
}

func TestRaiseFits(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		live  uint64
		pct   int
		limit int64
		want  bool
	}{
		{live: 1 * gib, pct: 400, limit: 6 * gib, want: true},        // goal 5 GiB ≤ 6 GiB
		{live: 13 * gib / 10, pct: 400, limit: 6 * gib, want: false}, // goal 6.5 GiB
		{live: 2 * gib, pct: 200, limit: 6 * gib, want: true},        // goal 6 GiB
		{live: 0, pct: 400, limit: 1, want: true},
		{live: 3 * gib, pct: -1, limit: 6 * gib, want: true}, // off: a collection at 6 GiB frees half
		{live: 31 * gib / 10, pct: -1, limit: 6 * gib, want: false},
	} {
		if got := raiseFits(c.live, c.pct, c.limit); got != c.want {
			t.Errorf("raiseFits(%d, %d, %d) = %v, want %v", c.live, c.pct, c.limit, got, c.want)
		}
	}
}

func TestUnpagedListBudgetFollowsTheMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(4 << 30)
	defer debug.SetMemoryLimit(prev)
	// An eighth of 4 GiB at 10 KiB an object.
	if got, want := unpagedListBudget(), (512<<20)/(10<<10); got != want {
		t.Errorf("with a 4 GiB limit: budget %d objects, want %d", got, want)
	}
	debug.SetMemoryLimit(40 << 10)
	if got := unpagedListBudget(); got != 1 {
		t.Errorf("with a 40 KiB limit: budget %d objects, want 1 (the budget is never 0, which means the default)", got)
	}
}
