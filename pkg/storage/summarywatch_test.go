package storage

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
)

// fakeFleet is a Reader whose watches deliver what the test sends, and a Summarizer that counts
// n objects in one group.
type fakeFleet struct {
	Reader
	n        atomic.Int64
	scans    atomic.Int64
	opened   atomic.Int64
	reopened atomic.Int64 // summaries taken once the watch was open a second time or more
	events   chan struct{}
	endWatch chan struct{}
	forbid   atomic.Bool // the watch ends with 403 instead of 410
}

type fakeWatch struct{ f *fakeFleet }

func (w fakeWatch) Freshness() []api.ClusterFreshness { return nil }
func (w fakeWatch) Warnings() []string                { return nil }
func (w fakeWatch) Run(ctx context.Context, sink Sink) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.f.endWatch:
			if w.f.forbid.Load() {
				return Error(http.StatusForbidden, "no longer allowed")
			}
			return Error(http.StatusGone, "gone")
		case <-w.f.events:
			if err := sink.Event("MODIFIED", Item{}); err != nil {
				return err
			}
		}
	}
}

func (f *fakeFleet) Watch(context.Context, WatchOptions) (Watch, error) {
	f.opened.Add(1)
	return fakeWatch{f}, nil
}

func (f *fakeFleet) Summarize(context.Context, SummaryOptions) (*Summary, error) {
	f.scans.Add(1)
	if f.opened.Load() > 1 {
		f.reopened.Add(1)
	}
	k := "g"
	n := int(f.n.Load())
	return &Summary{Summary: aggregate.Summary{By: []string{"k"}, Groups: []aggregate.Group{{Key: []*string{&k}, Count: n}}, Total: n}}, nil
}

// TestWatchSummary: the first summary comes at once; a fleet without events is not summarized
// again; an event whose counts do not change sends nothing; one that changes them sends the
// new counts; a watch that ends is opened again and the fleet counted again, so a change in
// between is not lost.
func TestWatchSummary(t *testing.T) {
	f := &fakeFleet{events: make(chan struct{}), endWatch: make(chan struct{})}
	f.n.Store(3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sent := make(chan int, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := WatchSummary(ctx, f, f, SummaryWatchOptions{Interval: 5 * time.Millisecond, Refresh: time.Hour}, func(s *Summary) error { sent <- s.Total; return nil })
		if err != nil {
			t.Errorf("WatchSummary: %v", err)
		}
	}()
	next := func(what string) int {
		t.Helper()
		select {
		case n := <-sent:
			return n
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no summary", what)
			return 0
		}
	}
	if n := next("the first"); n != 3 {
		t.Fatalf("first summary: %d, want 3", n)
	}
	time.Sleep(50 * time.Millisecond) // ten intervals without an event
	if s := f.scans.Load(); s != 1 {
		t.Errorf("%d summaries taken without an event, want 1", s)
	}
	f.events <- struct{}{} // counts unchanged
	for deadline := time.Now().Add(10 * time.Second); f.scans.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the event was not followed by a summary within 10s")
		}
	}
	time.Sleep(50 * time.Millisecond) // ten intervals more: nothing is sent, nothing counted again
	select {
	case n := <-sent:
		t.Errorf("a summary of unchanged counts was sent: %d", n)
	default:
	}
	if s := f.scans.Load(); s != 2 {
		t.Errorf("%d summaries after one event, want 2", s)
	}
	f.n.Store(4)
	for range 20 { // a burst: one summary for it, or a few, never one per event
		f.events <- struct{}{}
	}
	if n := next("after a change"); n != 4 {
		t.Errorf("after a change: %d, want 4", n)
	}
	// The burst's last event may still be counted: wait until no summary is taken for twenty
	// intervals, so that the next one is the reopening's.
	for last, quiet := f.scans.Load(), 0; quiet < 20; quiet++ {
		time.Sleep(5 * time.Millisecond)
		if s := f.scans.Load(); s != last {
			last, quiet = s, 0
		}
	}
	f.n.Store(5)
	f.endWatch <- struct{}{} // the watch ends; the change in between comes with the reopening
	if n := next("after the watch ended"); n != 5 {
		t.Errorf("after the watch ended: %d, want 5", n)
	}
	if o, r := f.opened.Load(), f.reopened.Load(); o != 2 || r != 1 {
		t.Errorf("watch opened %d times, %d summaries after it was opened again; want 2 and 1", o, r)
	}
	cancel()
	wg.Wait()
	if s := f.scans.Load(); s > 2+20 {
		t.Errorf("%d summaries for 22 events", s)
	}
}

// TestWatchSummaryRefreshes: without any object event, a summary is taken again every Refresh
// (a cluster that synced or failed shows); a watch that ends with an error other than 410 ends
// the stream with it.
func TestWatchSummaryRefreshes(t *testing.T) {
	f := &fakeFleet{events: make(chan struct{}), endWatch: make(chan struct{})}
	f.n.Store(1)
	sent := make(chan int, 16)
	done := make(chan error, 1)
	go func() {
		done <- WatchSummary(context.Background(), f, f, SummaryWatchOptions{Interval: 5 * time.Millisecond, Refresh: 20 * time.Millisecond}, func(s *Summary) error { sent <- s.Total; return nil })
	}()
	<-sent
	f.n.Store(2) // no event tells it
	select {
	case n := <-sent:
		if n != 2 {
			t.Errorf("refreshed summary: %d, want 2", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no summary refreshed without an event")
	}
	f.forbid.Store(true)
	f.endWatch <- struct{}{}
	select {
	case err := <-done:
		if Code(err) != http.StatusForbidden {
			t.Errorf("the stream ended with %v, want the watch's 403", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a watch that ended with 403 did not end the stream")
	}
}
