package local

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/watchcache"
)

// Watch opens a watch of this replica's clusters. Every watch, whatever it selects, runs a
// watchcache.Watcher, with its guard and its bookmarks: one that selects no cluster (yet) too,
// so that it ends with 410 when its plan changes and its position moves on.
//
// A watch that starts with the current objects is 429 while a cluster it spans is not
// complete here (Unready), and again when a cluster complete at that check was no longer whole
// in the watch cache at the position the watch starts from (a handoff in between).
func (s *Storage) Watch(ctx context.Context, opts storage.WatchOptions) (storage.Watch, error) {
	// Read now, never from a read scope: a watch outlives the request that opens it.
	v := s.view(context.Background())
	sel, err := s.selectForWatch(ctx, v, opts.Selection, true)
	if err != nil {
		return nil, err
	}
	h := sel.hub
	wo := watchcache.WatchOptions{Clusters: sel.query.Clusters, Matches: sel.matches}
	rv := opts.ResourceVersion
	switch {
	case opts.Initial:
		if rv != "" && rv != "0" {
			// Not older than rv: the cache now is.
			if _, err := watchcache.ParsePosition(rv); err != nil {
				return nil, storage.Error(http.StatusBadRequest, err.Error())
			}
		}
		wo.Initial = true
	case rv == "" || rv == "0":
	default:
		t, err := watchcache.ParsePosition(rv)
		if err != nil {
			return nil, storage.Error(http.StatusBadRequest, err.Error())
		}
		wo.From = t // another replica's, or merged: Watch says it is gone
	}
	if wo.Initial || rv == "" || rv == "0" {
		wo.From = h.Position()
	}
	if wo.Initial && !sel.none {
		clusters := sel.clusters()
		if waiting := s.unreadyAwait(ctx, sel.info, sel.resource, clusters); len(waiting) > 0 {
			return nil, refusedNotStarted(sel.resource, waiting) // an initial list without a cluster's objects reads as their deletes
		}
		held := slices.DeleteFunc(slices.Clone(clusters), func(c string) bool { return !h.Listed(c) })
		// The initial objects are those at the position after any wait.
		wo.From = h.Position()
		if lost := h.Unlisted(wo.From, held); len(lost) > 0 {
			return nil, refusedNotStarted(sel.resource, lost)
		}
	}
	wch, err := h.Watch(wo)
	if err != nil {
		return nil, storage.Error(http.StatusGone, GoneMessage(err))
	}
	w := &watch{s: s, sel: sel, wch: wch, from: wo.From, opts: opts, fresh: sel.freshness(nil)}
	// The watch keeps its selection for its life, and reads no status after this point: the
	// info, which points into the whole fleet's status, goes now.
	sel.info = nil
	return w, nil
}

// GoneMessage is what the 410 of a watch says of err, a watchcache.GoneError.
func GoneMessage(err error) string {
	msg := err.Error()
	if !strings.HasPrefix(msg, "the fleet changed") {
		msg = "resourceVersion expired: " + msg
	}
	return msg
}

// watch is an open watch of this replica.
type watch struct {
	s     *Storage
	sel   *selected
	wch   *watchcache.Watcher
	from  watchcache.Position
	opts  storage.WatchOptions
	fresh []api.ClusterFreshness
}

func (w *watch) Warnings() []string                { return nil }
func (w *watch) Freshness() []api.ClusterFreshness { return w.fresh }

// Position is where the watch starts.
func (w *watch) Position() watchcache.Position { return w.from }

// Run streams the watch into sink until ctx ends or its timeout passes (nil), its position
// is gone or its guard fires (410), or sink fails (its error).
func (w *watch) Run(ctx context.Context, sink storage.Sink) error {
	if w.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.opts.Timeout)
		defer cancel()
	}
	ro := watchcache.RunOptions{FirstBookmark: w.opts.StartBookmark, Guard: w.opts.Guard}
	if w.opts.Bookmarks {
		tick := time.NewTicker(w.s.opts.BookmarkInterval)
		defer tick.Stop()
		ro.Bookmarks = tick.C
	}
	// The native API shows no position on events; a part of a plan tells its fan-in each one.
	showRV := w.opts.Encoding.API != storage.NativeAPI || w.sel.planned
	err := w.wch.Run(ctx, &sinkOf{to: sink, epoch: w.from.Epoch, sel: w.sel, showRV: showRV}, ro)
	switch {
	case watchcache.IsGone(err):
		return storage.Error(http.StatusGone, GoneMessage(err))
	case ctx.Err() != nil:
		return nil // the client left, or the watch's timeout: a clean end
	}
	return err
}

// sinkOf passes a watchcache.Watcher's stream to a storage.Sink: each object as this replica
// serves it, with its position.
type sinkOf struct {
	to     storage.Sink
	epoch  string
	sel    *selected
	showRV bool // set each event's RV: its position
}

func (k *sinkOf) Event(typ string, it watchcache.Item) error {
	out := storage.Item{Key: it.Key, Object: k.sel.redact(it.Object), Seq: it.Seq}
	if k.showRV {
		out.RV = watchcache.Position{Epoch: k.epoch, Seq: it.Seq}.String()
	}
	return k.to.Event(typ, out)
}

func (k *sinkOf) Bookmark(pos watchcache.Position, initialEnd bool) error {
	return k.to.Bookmark(pos.String(), initialEnd)
}

func (k *sinkOf) Flush() { k.to.Flush() }
