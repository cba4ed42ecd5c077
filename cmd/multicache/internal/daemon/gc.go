package daemon

import (
	"context"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/multicache/multicache/pkg/clusterset"
)

// An initial sync allocates at a high rate (every object decoded, transformed and indexed)
// while the live heap grows from nothing, so at GOGC 100 the collector runs again and again over
// a heap that is still being built: it was about a third of the sync's CPU in a profile of 3
// clusters × 20k Pods. By default (config.DefaultSyncGCPercent, -1) it does not run while the
// sync lasts, unless the heap reaches the sync's memory budget (docs/BENCHMARKS.md, P7,
// measures what that saves against GOGC 100 and 400).

// syncMemoryBudget is a quarter of the memory limit in force (GOMEMLIMIT, memoryLimit, or 90%
// of the container's limit), or of the machine's memory without one: what the initial sync may
// spend beyond the cache itself. ok is false when there is no measure of either.
func syncMemoryBudget() (bytes int64, ok bool) {
	base := debug.SetMemoryLimit(-1)
	if base == math.MaxInt64 {
		total, err := memlimit.FromSystem()
		if err != nil || total == 0 || total >= math.MaxInt64 {
			return 0, false
		}
		base = int64(total)
	}
	return base / 4, true
}

// listedObjectBytes is what one object of a first list that is a LIST (not streamed) adds to
// the daemon's peak memory while the list runs: its share of the response and its decoded
// form, held until the store has taken them. P7 (docs/BENCHMARKS.md) measured the difference
// in peak RSS between the two ways, divided by the objects: 8.6 KiB at 3 × 20k Pods and
// 10.4 KiB at 3 × 50k (Pods of 2–3 containers, managedFields included), when the REST
// client's io.ReadAll still read the lists and the collector ran at 400% during the sync.
// Lists are now read into buffers of their expected size (pkg/clusterset/listdecode.go), and
// with the collector off both ways keep their garbage: P7's listed peaks are now below the
// streamed ones, so the figure errs on the side of listing less at once.
const listedObjectBytes = 10 << 10

// unpagedListBudget is the default of --unpaged-list-budget: as many objects as
// listedObjectBytes each fit in half the sync's memory budget (an eighth of the memory limit in
// force, or of the machine's memory), so that lists in flight and the heap they are stored into
// do not, together, take the room the API servers or other tenants of the machine need.
// Without a measure of memory, the library's default.
func unpagedListBudget() int {
	budget, ok := syncMemoryBudget()
	if !ok {
		return clusterset.DefaultUnpagedListBudget
	}
	return max(1, int(budget/2/listedObjectBytes))
}

// setGCPercent sets the collector's percent outside the sync and takeovers (gcPercent) to
// pct, unless pct is 0 or GOGC is set: an operator's own choice of GOGC stands. Call it before
// raiseGCForSync, whose end returns the collector to it.
func setGCPercent(pct int, log *zap.Logger) {
	if pct <= 0 || os.Getenv("GOGC") != "" {
		return
	}
	was := debug.SetGCPercent(pct)
	log.Info("garbage collector's percent set", zap.Int("gcPercent", pct), zap.Int("was", was))
}

// raiseGCForSync sets the collector's percent to pct until the returned function is called
// (once the sync, named by what in the log, is over), and returns it to what it was. pct -1
// turns the collector off meanwhile: it then collects only when the heap reaches the budget
// (the memory limit while the raise holds).
//
// What it trades: the heap may grow to (1 + pct/100) × the live heap between collections.
// So that the trade stays small, the raise has a budget of a quarter of the memory limit in
// force (GOMEMLIMIT, memoryLimit, or 90% of the container's limit), or of the machine's memory
// without one: the memory limit is the budget while the raise holds, and the raise holds only
// while its heap goal fits in the budget. Once the live heap outgrows that, GOGC's percent and
// the limit in force are back for the rest of the sync. A small fleet's sync thus runs raised
// throughout; a large one's only while its heap is small, and its peak is then what GOGC's
// percent costs, or the budget if that is more. (S1, 2M objects on one replica: the peak was
// 12.2 GiB when the raise held to the end under half the machine's memory.) Off (-1), the raise
// holds while the live heap is at most half the budget, as a raise to 100% would: the heap a
// collection keeps is then at most half the budget (the limit also counts the runtime's own
// memory, so in a small container collections come sooner than that). It does nothing when pct
// is 0 or no higher than the collector's percent now (gcPercent, or GOGC's 100), or when GOGC is
// set: an operator's own choice of GOGC stands. The returned function may be called more than
// once.
func raiseGCForSync(pct int, what string, log *zap.Logger) (restore func()) {
	if !raises(pct) {
		return func() {}
	}
	prevLimit := debug.SetMemoryLimit(-1)
	budget, ok := syncMemoryBudget()
	if !ok {
		return func() {} // no measure of the machine: no budget to hold the raise to
	}
	liveHeap := liveHeap // read once: the watchdog below uses this one
	if live, ok := liveHeap(); !ok || !raiseFits(live, pct, budget) {
		// A takeover starts over the cache already held: a live heap the raise does not
		// fit would meet a memory limit below it (collections back to back) until the
		// first check below.
		return func() {}
	}
	// The limit first: the collector is never off without it.
	debug.SetMemoryLimit(budget)
	prev := debug.SetGCPercent(pct)
	if prev < 0 { // the collector is off: leave it so
		debug.SetGCPercent(prev)
		debug.SetMemoryLimit(prevLimit)
		return func() {}
	}
	log.Info(what+": garbage collector raised", zap.Int("gcPercent", pct), zap.Int("was", prev), zap.Int64("budgetBytes", budget))
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
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			live, ok := liveHeap()
			if !ok {
				restore() // not measured by this runtime: no way to hold the raise to its budget
				return
			}
			if !raiseFits(live, pct, budget) {
				log.Info(what+": the live heap outgrew the raised collector's budget; back to GOGC's percent", zap.Uint64("liveHeapBytes", live))
				restore()
				return
			}
		}
	}()
	return restore
}

// raises reports whether a raise to pct raises the collector's percent now (gcPercent's, or
// GOGC's 100): off (-1), or above it. Not at 0, not at or below it (a "raise" that lowered it
// would cost the sync CPU), and not when GOGC is set (an operator's own choice of GOGC stands).
func raises(pct int) bool {
	if pct == 0 || os.Getenv("GOGC") != "" {
		return false
	}
	if pct < 0 {
		return true // raiseGCForSync leaves a collector already off as it is
	}
	now, ok := gcPercentNow()
	return !ok || (now >= 0 && pct > now)
}

// gcPercentNow is the collector's percent (/gc/gogc:percent), -1 when it is off; ok is false
// when this runtime does not measure it.
func gcPercentNow() (pct int, ok bool) {
	sample := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0, false
	}
	if v := sample[0].Value.Uint64(); v <= math.MaxInt32 {
		return int(v), true
	}
	return -1, true // off: the runtime's -1, read as unsigned
}

// liveHeap is the heap the last collection kept (/gc/heap/live:bytes); ok is false when this
// runtime does not measure it. A variable, so that tests can stand in for the runtime.
var liveHeap = func() (bytes uint64, ok bool) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0, false
	}
	return sample[0].Value.Uint64(), true
}

// raiseFits reports whether a live heap, grown by pct percent, fits in budget bytes. Off
// (pct < 0), the collector runs at the budget, and the raise fits as if pct were 100: while
// the live heap is at most half the budget.
func raiseFits(live uint64, pct int, budget int64) bool {
	if pct < 0 {
		pct = 100
	}
	return float64(live)*(1+float64(pct)/100) <= float64(budget)
}

// A takeover is a sync of its own: when a peer dies, each survivor lists the clusters it
// takes, hundreds at 1,000 clusters, a few at a time (sharding.maxWarmups), over a heap that
// already holds its own share. At GOGC 100 the collector then took 28% of the survivors' CPU
// in a profile of S2's kill (docs/BENCHMARKS.md), on cores the relists and the API servers
// needed.

// takeoverPoll is how often raiseGCForTakeovers reads the coordinator's warm-ups.
const takeoverPoll = 250 * time.Millisecond

// raiseGCForTakeovers raises the collector as raiseGCForSync does (pct, the same budget) while
// a takeover lasts: from when the coordinator owns more clusters than it warms at once
// (queued > 0, per warmups) until every cluster it owns is synced or failing (none warming or
// queued). A takeover of no more clusters than the warm-up slots runs at GOGC's percent, and
// so does one that starts over a live heap the raise does not fit in its budget. It returns
// when ctx ends, the collector as it found it. A cluster that stays Syncing without failing (a
// list that never completes) keeps the takeover going, as it keeps the first sync going; the
// raise itself still ends once the live heap outgrows what it fits in its budget. Run it after
// the initial sync's raise has ended: both set the same process-wide settings.
func raiseGCForTakeovers(ctx context.Context, warmups func() (warming, queued int), pct int, log *zap.Logger) {
	if !raises(pct) {
		return
	}
	t := time.NewTicker(takeoverPoll)
	defer t.Stop()
	var restore func() // non-nil while a takeover lasts (the raise may have ended sooner)
	defer func() {
		if restore != nil {
			restore()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		warming, queued := warmups()
		switch {
		case restore == nil && queued > 0:
			restore = raiseGCForSync(pct, "takeover", log.With(zap.Int("warming", warming), zap.Int("queued", queued)))
		case restore != nil && warming == 0 && queued == 0:
			restore()
			restore = nil
			log.Info("takeover over: every owned cluster synced or failing; the collector is as before")
		}
	}
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

// memoryReturns returns freed memory to the operating system and counts it: how often, and
// when last (so that a reading of RSS can tell whether one ran since the memory was freed).
type memoryReturns struct {
	total *prometheus.CounterVec
	last  prometheus.Gauge
}

func newMemoryReturns(reg prometheus.Registerer) *memoryReturns {
	m := &memoryReturns{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "multicache_memory_returned_total",
			Help: "Times freed heap memory was returned to the operating system (runtime/debug.FreeOSMemory), by what freed it: the initial sync, or clusters that moved.",
		}, []string{"after"}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "multicache_memory_returned_timestamp_seconds",
			Help: "Unix time at which freed heap memory was last returned to the operating system; 0 before the first time.",
		}),
	}
	for _, after := range []string{"initial-sync", "moves"} {
		m.total.WithLabelValues(after) // both series from the start, at 0
	}
	reg.MustRegister(m.total, m.last)
	return m
}

// free collects, returns the freed memory to the operating system, and records it under after.
func (m *memoryReturns) free(after string) {
	debug.FreeOSMemory()
	m.total.WithLabelValues(after).Inc()
	m.last.SetToCurrentTime()
}
