package main

import (
	"math"
	"runtime/debug"
	"testing"

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
	restore := raiseGCForSync(400, zap.NewNop())
	if got := gcPercent(); got != 400 {
		t.Errorf("during the sync: GC percent %d, want 400", got)
	}
	if l := debug.SetMemoryLimit(-1); l <= 0 || l == math.MaxInt64 || (limit != math.MaxInt64 && l != limit) {
		t.Errorf("during the sync: memory limit %d (was %d): want the one in force, or half the machine's memory", l, limit)
	}
	restore()
	if got := gcPercent(); got != before {
		t.Errorf("after the sync: GC percent %d, want %d again", got, before)
	}
	if l := debug.SetMemoryLimit(-1); l != limit {
		t.Errorf("after the sync: memory limit %d, want %d again", l, limit)
	}

	for _, pct := range []int{0, 100} {
		raiseGCForSync(pct, zap.NewNop())()
		if got := gcPercent(); got != before {
			t.Errorf("pct %d: GC percent %d, want it left at %d", pct, got, before)
		}
	}
	t.Setenv("GOGC", "150")
	restore = raiseGCForSync(400, zap.NewNop())
	if got := gcPercent(); got != before {
		t.Errorf("with GOGC set: GC percent %d, want it left at %d", got, before)
	}
	restore()
}
