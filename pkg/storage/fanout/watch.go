package fanout

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/watchcache"
)

// Watch opens every owner's watch and relays them as one stream: each object with the fleet's
// position after it (a reflector resumes from any event), and a BOOKMARK once every part has
// told its position. The stream never goes silent: when a cluster moves, joins, leaves, goes
// down or comes back, or a part's watch ends, it ends with 410 and the client lists again. A
// position of one replica's answer, or from before a cluster moved, is 410 before it starts.
// A watch this replica answers alone is its own, guarded by its plan.
func (r *Reader) Watch(ctx context.Context, opts storage.WatchOptions) (storage.Watch, error) {
	pl, err := r.planOf(opts.Selection)
	if err != nil {
		return nil, err
	}
	if pl.local() {
		o := opts
		o.Selection = partSelection(opts.Selection, part{clusters: pl.selfClusters()})
		o.Guard = &guard{fleet: r.opts.Fleet, was: pl}
		return r.opts.Local.Watch(ctx, o)
	}
	if len(pl.down) > 0 && opts.Initial {
		return nil, refuseDown(pl)
	}
	pl = pl.withSelf(r.opts.Fleet.Identity())
	_, single := pl.single()
	var from watchcache.Position
	var resume bool
	if !single {
		if from, resume, err = watchFrom(opts.ResourceVersion, pl); err != nil {
			return nil, err
		}
	}
	changed := r.opts.Fleet.WaitChange()
	if why := changeFrom(pl, planOf(r.opts.Fleet.Owners(), pl.keep)); why != "" {
		return nil, storage.Error(http.StatusGone, "the fleet changed since this watch started: "+why+"; list again")
	}
	fi := &fanIn{r: r, pl: pl, opts: opts, changed: changed, parts: make([]storage.Watch, len(pl.parts)), single: single}
	fi.ctx, fi.cancel = context.WithCancel(context.WithoutCancel(ctx))
	// The parts outlive the request that opened them only until Run ends.
	errs := make([]error, len(pl.parts))
	var wg sync.WaitGroup
	for i, p := range pl.parts {
		o := opts
		o.Selection = partSelection(opts.Selection, p)
		o.ResourceVersion = ""
		o.Bookmarks = true // the fleet's BOOKMARK needs every part's position
		o.Guard = nil
		if opts.Timeout > 0 {
			o.Timeout = opts.Timeout + time.Minute // the fan-in ends first, cleanly
		}
		switch {
		case single:
			// The part's answer is the watch's: its positions, its bookmarks.
			o.ResourceVersion, o.Bookmarks, o.StartBookmark = opts.ResourceVersion, opts.Bookmarks, opts.StartBookmark
		case resume:
			o.ResourceVersion, _ = partPosition(from, p)
		default:
			o.ResourceVersion = opts.ResourceVersion // "" or "0"
		}
		wg.Go(func() {
			fi.parts[i], errs[i] = r.reader(p).Watch(fi.ctx, o)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			fi.cancel()
			return nil, err
		}
	}
	fi.pos = map[string]watchcache.PartPosition{}
	for i, p := range pl.parts {
		rv, _ := partPosition(from, p)
		fi.pos[p.peer] = watchcache.PartPosition{RV: rv, Set: p.set()}
		fi.fresh = mergeFreshness(fi.fresh, fi.parts[i].Freshness())
		fi.warnings = storage.AppendWarnings(fi.warnings, fi.parts[i].Warnings()...)
	}
	fi.fresh = mergeFreshness(fi.fresh, downFreshness(ctx, pl.down))
	return fi, nil
}

// watchFrom reads a fan-in watch's resourceVersion: where each part resumes (resume false: from
// now, or as "0" asks). A position of one replica's answer, or one from before a cluster moved,
// is 410.
func watchFrom(rv string, pl plan) (from watchcache.Position, resume bool, err error) {
	if rv == "" || rv == "0" {
		return watchcache.Position{}, false, nil
	}
	t, isFleet := parseMerged(rv)
	if !isFleet {
		return watchcache.Position{}, false, storage.Error(http.StatusGone, "resourceVersion expired: it comes from one replica's answer and the fleet's clusters are now spread over several; list again")
	}
	if err := resumable(t, pl); err != nil {
		return watchcache.Position{}, false, storage.Error(http.StatusGone, "resourceVersion expired: "+err.Error()+"; list again")
	}
	return t, true, nil
}

// fanIn is a watch of several parts.
type fanIn struct {
	r       *Reader
	pl      plan
	opts    storage.WatchOptions
	changed <-chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	parts   []storage.Watch
	// single: one part answers the whole plan (plan.single), and its stream is relayed as it
	// is, positions included; the fan-in only ends it when the plan changes.
	single   bool
	pos      map[string]watchcache.PartPosition
	fresh    []api.ClusterFreshness
	warnings []string
}

func (fi *fanIn) Freshness() []api.ClusterFreshness { return fi.fresh }
func (fi *fanIn) Warnings() []string                { return fi.warnings }

// partEvent is what a part's stream sends the fan-in: an event, a bookmark, or its end.
type partEvent struct {
	peer       string
	typ        string // "" for a bookmark
	item       storage.Item
	rv         string
	initialEnd bool
	done       bool
	err        error
}

// chanSink passes a part's stream to the fan-in.
type chanSink struct {
	ctx  context.Context
	peer string
	out  chan<- partEvent
}

func (c chanSink) send(ev partEvent) error {
	select {
	case c.out <- ev:
		return nil
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
}

func (c chanSink) Event(typ string, it storage.Item) error {
	return c.send(partEvent{peer: c.peer, typ: typ, item: it, rv: it.RV})
}

func (c chanSink) Bookmark(rv string, initialEnd bool) error {
	return c.send(partEvent{peer: c.peer, rv: rv, initialEnd: initialEnd})
}

func (chanSink) Flush() {}

// Run relays the parts' streams to sink until ctx ends or the watch's timeout (nil), or the
// watch must end (410: the plan changed, or a part's watch ended; a part's own refusal as it
// gave it).
func (fi *fanIn) Run(ctx context.Context, sink storage.Sink) error {
	defer fi.cancel()
	events := make(chan partEvent, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer fi.cancel()
	for i, w := range fi.parts {
		peer := fi.pl.parts[i].peer
		wg.Go(func() {
			err := w.Run(fi.ctx, chanSink{ctx: fi.ctx, peer: peer, out: events})
			select {
			case events <- partEvent{peer: peer, done: true, err: err}:
			case <-fi.ctx.Done():
			}
		})
	}
	var expire <-chan time.Time
	if fi.opts.Timeout > 0 {
		t := time.NewTimer(fi.opts.Timeout)
		defer t.Stop()
		expire = t.C
	}
	initial := fi.opts.Initial && fi.opts.StartBookmark
	initialDone := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-expire:
			return nil // timeoutSeconds: a clean end, the client resumes from its last position
		case <-fi.changed:
			fi.changed = fi.r.opts.Fleet.WaitChange()
			if why := changeFrom(fi.pl, planOf(fi.r.opts.Fleet.Owners(), fi.pl.keep)); why != "" {
				return storage.Error(http.StatusGone, "the fleet changed since this watch started: "+why+"; list again")
			}
		case ev := <-events:
			if fi.single && !ev.done {
				var err error
				if ev.typ != "" {
					err = sink.Event(ev.typ, ev.item)
				} else {
					err = sink.Bookmark(ev.rv, ev.initialEnd)
				}
				if err != nil {
					return err
				}
				if len(events) == 0 {
					sink.Flush()
				}
				continue
			}
			if ev.done {
				if ev.err != nil && storage.Code(ev.err) < 500 {
					return ev.err // the part's own 410, 429…
				}
				return storage.Error(http.StatusGone, fmt.Sprintf("the watch of replica %q ended (%v); list again", ev.peer, ev.err))
			}
			if ev.rv != "" {
				fi.pos[ev.peer] = watchcache.PartPosition{RV: ev.rv, Set: fi.pos[ev.peer].Set}
			}
			var err error
			switch {
			case ev.typ != "":
				it := ev.item
				it.RV = ""
				if fi.opts.Encoding.API != storage.NativeAPI {
					// The native API shows no position on events: only its bookmarks carry one.
					it.RV = watchcache.Position{Parts: fi.pos}.String()
				}
				err = sink.Event(ev.typ, it)
			case ev.initialEnd:
				initialDone[ev.peer] = true
				if !initial || len(initialDone) < len(fi.parts) {
					continue
				}
				err = sink.Bookmark(watchcache.Position{Parts: fi.pos}.String(), true)
			default:
				if !fi.opts.Bookmarks || !allPositions(fi.pos) {
					continue
				}
				err = sink.Bookmark(watchcache.Position{Parts: fi.pos}.String(), false)
			}
			if err != nil {
				return err
			}
			if len(events) == 0 {
				sink.Flush()
			}
		}
	}
}

// allPositions reports whether every part has told its position.
func allPositions(pos map[string]watchcache.PartPosition) bool {
	for _, p := range pos {
		if p.RV == "" {
			return false
		}
	}
	return true
}
