package main

import (
	"context"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/multicache/multicache/pkg/clusterset"
)

// An initial sync allocates at a high rate (every object decoded, transformed and indexed)
// while the live heap grows from nothing, so at GOGC 100 the collector runs again and again over
// a heap that is still being built: it was about a third of the sync's CPU in a profile of 3
// clusters × 20k Pods. config.DefaultSyncGCPercent (400) makes it run about a quarter as often
// while the sync lasts (docs/BENCHMARKS.md, P7, measures what that saves).

// raiseGCForSync sets the collector's percent to pct until the returned function is called
// (once the initial sync is over), and returns it to what it was.
//
// What it trades: the heap may grow to (1 + pct/100) × the live heap between collections.
// So that the trade stays small, it holds only while that goal fits in half of a memory limit:
// the one in force (GOMEMLIMIT, memoryLimit, or 90% of the container's limit), or else the
// machine's memory, which is then the limit meanwhile. Once the live heap outgrows it, GOGC's
// percent is back for the rest of the sync, and the peak is what GOGC's would have cost: a
// small fleet's sync runs raised throughout, a large one's only while its heap is small.
// (S1, 2M objects on one replica, peaked at 12.2 GiB when the raise held to a limit of half
// the machine.) It does nothing when pct is 100 or less, or when GOGC is set: an operator's
// own choice of GOGC stands. The returned function may be called more than once.
func raiseGCForSync(pct int, log *zap.Logger) (restore func()) {
	if pct <= 100 || os.Getenv("GOGC") != "" {
		return func() {}
	}
	prev := debug.SetGCPercent(pct)
	if prev < 0 { // the collector is off: leave it so
		debug.SetGCPercent(prev)
		return func() {}
	}
	prevLimit := debug.SetMemoryLimit(-1)
	limit := prevLimit
	if prevLimit == math.MaxInt64 {
		if total, err := memlimit.FromSystem(); err == nil && total > 0 && total < math.MaxInt64 {
			limit = int64(total)
			debug.SetMemoryLimit(limit)
		}
	}
	log.Info("initial sync: garbage collector raised", zap.Int("gcPercent", pct), zap.Int("was", prev), zap.Int64("memoryLimitBytes", limit))
	done := make(chan struct{})
	var once sync.Once
	restore = func() {
		once.Do(func() {
			close(done)
			debug.SetGCPercent(prev)
			debug.SetMemoryLimit(prevLimit)
		})
	}
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			metrics.Read(sample)
			if sample[0].Value.Kind() != metrics.KindUint64 {
				return // not measured by this runtime: the raise holds until the sync is over
			}
			if live := sample[0].Value.Uint64(); !raiseFits(live, pct, limit) {
				log.Info("initial sync: the live heap outgrew the raised collector; back to GOGC's percent", zap.Uint64("liveHeapBytes", live))
				restore()
				return
			}
		}
	}()
	return restore
}

// raiseFits reports whether a heap of live bytes, grown by pct percent, fits in half of limit.
func raiseFits(live uint64, pct int, limit int64) bool {
	return float64(live)*(1+float64(pct)/100) <= float64(limit)/2
}

// waitInitialSync waits until reg has loaded its clusters and none of their resources is
// Pending or Syncing (each Synced, NotServed, Degraded or Failed), or until ctx ends, and
// returns "cluster/resource" for each that is failing. A cluster that cannot be reached thus
// does not keep the sync's collector setting.
func waitInitialSync(ctx context.Context, reg *clusterset.Registry) (failing []string) {
	_ = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		if !reg.Loaded() {
			return false, nil
		}
		failing = failing[:0]
		for _, cs := range reg.Status() {
			for _, rs := range cs.Resources {
				switch rs.State {
				case clusterset.Pending, clusterset.Syncing:
					return false, nil
				case clusterset.Failed, clusterset.Degraded:
					failing = append(failing, cs.Name+"/"+rs.Resource)
				}
			}
		}
		return true, nil
	})
	return failing
}
