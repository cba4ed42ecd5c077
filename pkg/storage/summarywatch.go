package storage

import (
	"context"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/multicache/multicache/pkg/api"
)

// SummaryWatchOptions is a summary that streams.
type SummaryWatchOptions struct {
	SummaryOptions
	// Interval is the least time between two summaries sent: changes within it are sent
	// together, in the next one.
	Interval time.Duration
	// Timeout ends the stream cleanly; 0: none.
	Timeout time.Duration
	// Refresh is how often a summary is taken without an object event, for what no event of
	// the selection tells (clusters that sync, fail or leave; owners that change). Default ten
	// intervals.
	Refresh time.Duration
}

// WatchSummary sends a summary of opts, then a new one whenever its counts (its groups, its
// total, or which clusters are synced) change, at most once per interval, until ctx ends or
// the timeout passes (nil), or send, a summary or the watch fails (its error). It summarizes
// again after an object event, and every Refresh without one.
//
// It watches the selection (r.Watch, from now) to learn when objects change, and summarizes
// again only after a change: a fleet that does not change costs no scan, however short the
// interval. A watch that ends (410: clusters moved, a position gone) is opened again and the
// summary taken again, so no change is missed across it.
func WatchSummary(ctx context.Context, r Reader, sm Summarizer, opts SummaryWatchOptions, send func(*Summary) error) error {
	// The watch's goroutine ends with ctx: when this returns, whatever the reason.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timedOut := ctx.Done()
	if opts.Timeout > 0 {
		tctx, tcancel := context.WithTimeout(ctx, opts.Timeout)
		defer tcancel()
		timedOut = tctx.Done()
	}
	var dirty atomic.Bool
	// Any change of the selection's objects; owner= is judged by the summary (a watch cannot
	// follow owners), so every object event of the resource counts as a change.
	watchSel := opts.Selection
	watchSel.Owner = ""
	w, err := r.Watch(ctx, WatchOptions{Selection: watchSel, Bookmarks: true, Encoding: Encoding{API: NativeAPI}})
	if err != nil {
		return err
	}
	watchDone := make(chan error, 1)
	run := func(w Watch) {
		go func() { watchDone <- w.Run(ctx, dirtySink{&dirty}) }()
	}
	run(w)
	var last *Summary
	tick := time.NewTicker(opts.Interval)
	defer tick.Stop()
	ended := false // the watch ended; it is opened again at the next tick
	ticks, refreshTicks := 0, 10
	if opts.Refresh > 0 {
		refreshTicks = max(1, int(opts.Refresh/opts.Interval))
	}
	dirty.Store(true) // the first summary
	for {
		if dirty.Swap(false) {
			sum, err := sm.Summarize(ctx, opts.SummaryOptions)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return err
			}
			if last == nil || !sameCounts(last, sum) {
				if err := send(sum); err != nil {
					return err
				}
				last = sum
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-timedOut:
			return nil
		case werr := <-watchDone:
			// A watch that ended with 410 (its clusters moved, its position gone) or at its
			// server's timeout is opened again; any other end (403, 400) ends the stream.
			if werr != nil && Code(werr) != http.StatusGone {
				return werr
			}
			ended = true
		case <-tick.C:
			if ticks++; ticks%refreshTicks == 0 {
				// What no object event tells: a cluster that synced, failed or left, an
				// owner that changed (by=owner, owner=).
				dirty.Store(true)
			}
			if !ended {
				continue
			}
			// Open it again, then count again, so that what changed between the two
			// watches is counted.
			if w, err = r.Watch(ctx, WatchOptions{Selection: watchSel, Bookmarks: true, Encoding: Encoding{API: NativeAPI}}); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			ended = false
			run(w)
			dirty.Store(true)
		}
	}
}

// dirtySink marks a change for each object event; bookmarks change nothing.
type dirtySink struct{ dirty *atomic.Bool }

func (s dirtySink) Event(string, Item) error    { s.dirty.Store(true); return nil }
func (s dirtySink) Bookmark(string, bool) error { return nil }
func (s dirtySink) Flush()                      {}

// sameCounts reports whether a and b count the same: the same groups with the same counts, the
// same total, and the same clusters synced and failing.
func sameCounts(a, b *Summary) bool {
	if a.Total != b.Total || len(a.Groups) != len(b.Groups) || len(a.Freshness) != len(b.Freshness) {
		return false
	}
	counts := make(map[string]int, len(a.Groups))
	for _, g := range a.Groups {
		counts[groupText(g.Key)] = g.Count
	}
	for _, g := range b.Groups {
		if n, ok := counts[groupText(g.Key)]; !ok || n != g.Count {
			return false
		}
	}
	return slices.EqualFunc(a.Freshness, b.Freshness, func(x, y api.ClusterFreshness) bool {
		return x.Name == y.Name && x.Synced == y.Synced && x.Error == y.Error && x.NotServed == y.NotServed && x.Forbidden == y.Forbidden
	})
}

// groupText is a group's key as one comparable text (a null apart from every string).
func groupText(key []*string) string {
	var b []byte
	for _, v := range key {
		if v == nil {
			b = append(b, 0)
			continue
		}
		b = append(b, 1)
		b = append(b, *v...)
		b = append(b, 0)
	}
	return string(b)
}
