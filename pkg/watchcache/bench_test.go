package watchcache

import (
	"context"
	"errors"
	"strconv"
	"testing"
)

// benchCache is a Cache of 100 clusters × 2,000 ConfigMaps, as a large fleet's.
func benchCache(b *testing.B) *Cache {
	c := New(Options{MaxEvents: 1000, MaxBytes: 1 << 30})
	for i := range 100 {
		cl := "c" + strconv.Itoa(i)
		for j := range 2000 {
			c.OnAdd(cl, cmAt("o"+strconv.Itoa(j), "1"), false)
		}
	}
	return c
}

// BenchmarkSnapshotOneCluster: the watch-list of one cluster (/clusters/{name}) in a fleet of
// 100 reads that cluster's objects, not the fleet's.
//
//	go test -run '^$' -bench 'Snapshot|Handoff' -benchmem ./pkg/watchcache/
func BenchmarkSnapshotOneCluster(b *testing.B) {
	c := benchCache(b)
	pos := c.Position()
	for b.Loop() {
		items, err := c.Snapshot(pos, []string{"c42"})
		if err != nil || len(items) != 2000 {
			b.Fatalf("%d items, %v", len(items), err)
		}
	}
}

// BenchmarkHandoff: a cluster of 2,000 objects moves away from a fleet of 100, and back (its
// 2,000 adds are most of the cost): the handoff costs the Cache, and every event waiting for
// its lock, that cluster, not the fleet.
func BenchmarkHandoff(b *testing.B) {
	c := benchCache(b)
	i := 0
	for b.Loop() {
		cl := "c" + strconv.Itoa(i%100)
		c.OnHandoff(cl)
		for j := range 2000 {
			c.OnAdd(cl, cmAt("o"+strconv.Itoa(j), "1"), false)
		}
		i++
	}
}

// BenchmarkNextNamedClusters: a watch of a third of 1,000 clusters (a replica's part, or a
// caller who may read only those) reads the one event after its position, as each watch does
// on each event. One cluster moved away before the watch's position (as after any move), and
// none since: nothing in the check need grow with the clusters.
//
//	go test -run '^$' -bench NextNamedClusters -benchmem ./pkg/watchcache/
func BenchmarkNextNamedClusters(b *testing.B) {
	c := New(Options{MaxEvents: 1000, MaxBytes: 1 << 30})
	var named []string
	for i := range 1000 {
		cl := "c" + strconv.Itoa(i)
		c.OnAdd(cl, cmAt("o", "1"), false)
		if i%3 == 0 {
			named = append(named, cl)
		}
	}
	c.OnHandoff("c1")
	pos := c.Position()
	c.OnAdd("c0", cmAt("p", "1"), false)
	buf := make([]Event, 0, 16)
	for range b.N {
		evs, _, err := c.Next(pos, named, buf[:0])
		if err != nil || len(evs) != 1 {
			b.Fatalf("%d events, %v", len(evs), err)
		}
	}
}

// wideCache is a Cache of a ring of maxEvents holding 1,000 clusters of 2 objects each, their
// names, the position after them, and then `after` updates, spread over the clusters.
func wideCache(maxEvents, after int) (*Cache, []string, Position) {
	c := New(Options{MaxEvents: maxEvents, MaxBytes: 1 << 30})
	var clusters []string
	for i := range 1000 {
		cl := "c" + strconv.Itoa(i)
		clusters = append(clusters, cl)
		c.OnAdd(cl, cmAt("o1", "1"), false)
		c.OnAdd(cl, cmAt("o2", "1"), false)
	}
	pos := c.Position()
	for i := range after {
		c.OnUpdate(clusters[i%len(clusters)], nil, cmAt("o1", strconv.Itoa(i+2)))
	}
	return c, clusters, pos
}

// BenchmarkSnapshotEachCluster: a watch's initial events over 1,000 clusters of 2 objects
// read one cluster at a time, as Watcher.Run reads them: what a watch's start costs the
// Cache, under its lock. From the newest position, it grows with the objects it sends; each
// cluster's read also walks the events after the position (after-1000: one update in each
// cluster since), so then it grows with clusters × those events.
//
//	go test -run '^$' -bench SnapshotEachCluster -benchmem ./pkg/watchcache/
func BenchmarkSnapshotEachCluster(b *testing.B) {
	for _, after := range []int{0, 1000} {
		b.Run("after-"+strconv.Itoa(after), func(b *testing.B) {
			c, clusters, pos := wideCache(1000, after)
			for range b.N {
				n := 0
				for _, cl := range clusters {
					items, err := c.Snapshot(pos, []string{cl})
					if err != nil {
						b.Fatal(err)
					}
					n += len(items)
				}
				if n != 2000 {
					b.Fatalf("%d items", n)
				}
			}
		})
	}
}

// BenchmarkWatchStart: a watch of a part's 1,000 clusters (2 objects each) that starts with
// the objects at a position, as a fleet watch resumed from a position opens at each replica:
// its initial events, up to the bookmark that ends them, under a ring of 100,000 events (the
// default watchBuffer) that holds `after` updates since the position, spread over the
// clusters. Each cluster's objects are read as of the position, so each read puts back what
// those updates changed.
//
//	go test -run '^$' -bench WatchStart -benchmem ./pkg/watchcache/
func BenchmarkWatchStart(b *testing.B) {
	for _, after := range []int{0, 1000, 10000} {
		b.Run("after-"+strconv.Itoa(after), func(b *testing.B) {
			c, clusters, pos := wideCache(100000, after)
			for range b.N {
				w, err := c.Watch(WatchOptions{From: pos, Initial: true, Clusters: clusters})
				if err != nil {
					b.Fatal(err)
				}
				s := &countSink{}
				if err := w.Run(context.Background(), s, RunOptions{FirstBookmark: true}); !errors.Is(err, errInitialDone) || s.added != 2000 {
					b.Fatalf("%d initial events, %v", s.added, err)
				}
			}
		})
	}
}

// errInitialDone ends a countSink's watch at its first bookmark.
var errInitialDone = errors.New("initial events sent")

// countSink counts a watch's initial events and ends it at the bookmark after them.
type countSink struct{ added int }

func (s *countSink) Event(typ string, _ Item) error {
	if typ == Added {
		s.added++
	}
	return nil
}
func (s *countSink) Bookmark(Position, bool) error { return errInitialDone }
func (s *countSink) Flush()                        {}
