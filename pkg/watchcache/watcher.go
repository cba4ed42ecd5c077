package watchcache

import (
	"context"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/multicache/multicache/pkg/aggregate"
)

// Batch is how many events a watcher takes from the Cache per read, and how many initial
// objects it writes between flushes.
const Batch = 256

// WatchOptions says what one watch serves.
type WatchOptions struct {
	// From is the position the watch starts at: one Cache's (a merged one is Gone).
	From Position
	// Initial: first every object at From that matches, as Added in key order (the snapshot
	// at From, so exactly the state the events after it continue), then the events after it.
	Initial bool
	// Clusters the watch spans; nil: every cluster.
	Clusters []string
	// Matches says whether an object of a cluster matches the watch's query; nil: every
	// object of Clusters.
	Matches func(cluster string, obj any) bool
}

// Sink receives what a watch sends; the API fronts write each call on the wire.
type Sink interface {
	// Event sends an Added, Modified or Deleted object.
	Event(typ string, it Item) error
	// Bookmark sends the watch's position. initialEnd marks the bookmark that ends the initial
	// objects (the k8s.io/initial-events-end annotation of the Kubernetes API).
	Bookmark(pos Position, initialEnd bool) error
	// Flush pushes what was sent to the client.
	Flush()
}

// Guard ends a watch when what it was planned on changes (the fleet's owners of its clusters).
type Guard interface {
	// Changed is closed when Why may answer differently.
	Changed() <-chan struct{}
	// Why says how the plan changed, "" while it has not.
	Why() string
}

// RunOptions are the timing of one watch's stream.
type RunOptions struct {
	// Bookmarks ticks when a periodic Bookmark is due; nil: none.
	Bookmarks <-chan time.Time
	// FirstBookmark sends a Bookmark after the initial objects, or at the start when there
	// are none: with initialEnd set when the watch has initial objects.
	FirstBookmark bool
	// Guard, when set, ends the watch Gone once it reports a change: checked before anything
	// is sent, and whenever it fires.
	Guard Guard
}

// Watcher serves one watch from a Cache: an iterator over the snapshot at its start, then
// over the events after it, that applies the watch's query to each event's object and
// previous state, as kube-apiserver's cacheWatcher does:
//   - an object that matches now and did not before is Added;
//   - one that matched before and does not now is Deleted (it left the watch's view);
//   - one that matches both times keeps its event's type;
//   - one that matches neither time is not sent.
//
// A Handoff event is never sent: a watch that spans the cluster is Gone instead (Cache.Next).
type Watcher struct {
	c    *Cache
	opts WatchOptions
	pos  Position
	// initial are the clusters whose snapshot at opts.From the watch starts with, in order.
	initial []string
	// only is opts.Clusters as a set (nil for every cluster): judged per event, and a
	// watch's clusters may be a thousand.
	only sets.Set[string]
}

// Watch opens a watch at opts.From. It fails with a GoneError when From cannot be continued
// for opts.Clusters. The initial objects are read when Run sends them, one cluster at a time,
// so that neither the Cache's lock nor the watch's memory holds the whole fleet at once; the
// events after From are walked once for all of them (clusterSnapshots).
func (c *Cache) Watch(opts WatchOptions) (*Watcher, error) {
	w := &Watcher{c: c, opts: opts, pos: opts.From}
	if len(opts.Clusters) > 0 {
		w.only = sets.New(opts.Clusters...)
	}
	if err := c.Check(opts.From, opts.Clusters); err != nil {
		return nil, err
	}
	if opts.Initial {
		w.initial = c.clustersAt(opts.From, opts.Clusters)
	}
	return w, nil
}

// Position is where the watch stands: the newest event it has read (sent or not).
func (w *Watcher) Position() Position { return w.pos }

func (w *Watcher) matches(cluster string, obj any) bool {
	if w.only != nil && !w.only.Has(cluster) {
		return false
	}
	return w.opts.Matches == nil || w.opts.Matches(cluster, obj)
}

// translate is what the watch sends for ev: a type and whether to send it at all.
func (w *Watcher) translate(ev Event) (string, bool) {
	if ev.Type == Handoff {
		return "", false // of a cluster this watch does not span: Next ends the others Gone
	}
	now := w.matches(ev.Cluster, ev.Object)
	if ev.Type != Modified {
		return ev.Type, now
	}
	was := ev.Prev != nil && w.matches(ev.Cluster, ev.Prev)
	switch {
	case now && !was:
		return Added, true
	case !now && was:
		return Deleted, true
	}
	return Modified, now
}

// Run sends the watch to sink until ctx ends (nil), its position is gone or its Guard reports
// a change (a GoneError: the fronts end the stream with a 410 ERROR event), or sink fails (its
// error). It reads the Cache at its own pace: while catching up through a backlog it flushes
// at least every 100ms, and once caught up after every batch.
func (w *Watcher) Run(ctx context.Context, sink Sink, ro RunOptions) error {
	var changed <-chan struct{}
	check := func() error {
		if ro.Guard == nil {
			return nil
		}
		next := ro.Guard.Changed() // before Why: a change in between is not missed
		if why := ro.Guard.Why(); why != "" {
			return &GoneError{Msg: "the fleet changed since this watch started: " + why + "; list again"}
		}
		changed = next
		return nil
	}
	if err := check(); err != nil {
		return err // nothing sent: the plan changed before the watch started
	}
	sent := 0
	snap := w.c.snapshots(w.opts.From, w.opts.Clusters)
	for _, cl := range w.initial {
		items, err := snap.read(cl)
		if err != nil {
			return err
		}
		items = slices.DeleteFunc(items, func(it Item) bool { return !w.matches(cl, it.Object) })
		slices.SortFunc(items, func(a, b Item) int { return CompareKeys(a.Key, b.Key) })
		for _, it := range items {
			if err := sink.Event(Added, it); err != nil {
				return err
			}
			if sent++; sent%Batch == 0 {
				sink.Flush()
			}
		}
	}
	if ro.FirstBookmark {
		if err := sink.Bookmark(w.pos, w.opts.Initial); err != nil {
			return err
		}
	}
	sink.Flush()
	buf := make([]Event, 0, Batch)
	flushed := time.Now()
	for {
		select {
		case <-changed:
			if err := check(); err != nil {
				return err
			}
		default:
		}
		evs, wake, err := w.c.Next(w.pos, w.opts.Clusters, buf[:0])
		if err != nil {
			return err
		}
		for _, ev := range evs {
			w.pos.Seq = ev.Seq
			if typ, ok := w.translate(ev); ok {
				if err := sink.Event(typ, Item{Key: ev.Key, Object: ev.Object, Seq: ev.Seq}); err != nil {
					return err
				}
			}
		}
		clear(evs) // drop references to the objects
		if wake == nil {
			// More is kept: read on, flushing now and then, so that a watch catching up
			// through a long backlog still delivers and still notices its client leaving.
			if ctx.Err() != nil {
				return nil
			}
			if time.Since(flushed) > 100*time.Millisecond {
				sink.Flush()
				flushed = time.Now()
			}
			continue
		}
		sink.Flush()
		flushed = time.Now()
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-changed:
			if err := check(); err != nil {
				return err
			}
		case <-ro.Bookmarks:
			if err := sink.Bookmark(w.pos, false); err != nil {
				return err
			}
			sink.Flush()
		}
	}
}

// CompareKeys orders keys as every list and watch does: cluster, namespace, name.
func CompareKeys(a, b aggregate.Key) int {
	if c := strings.Compare(a.Cluster, b.Cluster); c != 0 {
		return c
	}
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}
