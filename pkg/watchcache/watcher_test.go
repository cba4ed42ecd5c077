package watchcache

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// recorder is a Sink that records what a watch sends, and calls after for each call.
type recorder struct {
	sent  []string
	after func(r *recorder)
}

func (r *recorder) Event(typ string, it Item) error {
	cm := it.Object.(*corev1.ConfigMap)
	r.sent = append(r.sent, fmt.Sprintf("%s %s %s=%s", typ, it.Key, cm.ResourceVersion, cm.Labels["app"]))
	r.call()
	return nil
}

func (r *recorder) Bookmark(pos Position, end bool) error {
	r.sent = append(r.sent, fmt.Sprintf("BOOKMARK %d end=%v", pos.Seq, end))
	r.call()
	return nil
}

func (r *recorder) Flush() {}

func (r *recorder) call() {
	if r.after != nil {
		r.after(r)
	}
}

// stopAfter cancels the watch once it has sent n things.
func stopAfter(n int, cancel context.CancelFunc) func(*recorder) {
	return func(r *recorder) {
		if len(r.sent) >= n {
			cancel()
		}
	}
}

func labelled(name, rv, app string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: rv, Labels: map[string]string{"app": app}}}
}

func appIs(app string) func(string, any) bool {
	return func(_ string, obj any) bool { return obj.(*corev1.ConfigMap).Labels["app"] == app }
}

// TestWatcherTransitions: a watch sends an object that starts matching its query as ADDED, one
// that stops as DELETED, one that matches before and after with its own type, and nothing for
// one that matches neither time; the initial objects come first, in key order, then the bookmark
// that ends them.
func TestWatcherTransitions(t *testing.T) {
	c := newTestCache(100, 1<<30)
	c.OnAdd("c2", labelled("b", "1", "web"), false)
	c.OnAdd("c1", labelled("z", "1", "web"), false)
	c.OnAdd("c1", labelled("a", "1", "web"), false)
	c.OnAdd("c1", labelled("x", "1", "db"), false)
	c.OnAdd("c3", labelled("q", "1", "web"), false) // deleted after the start: still in the snapshot
	start := c.Position()
	c.OnUpdate("c1", nil, labelled("a", "2", "db"))  // stops matching
	c.OnUpdate("c1", nil, labelled("x", "2", "web")) // starts matching
	c.OnUpdate("c2", nil, labelled("b", "2", "web")) // matches both times
	c.OnUpdate("c1", nil, labelled("a", "3", "db"))  // matches neither time
	c.OnDelete("c1", labelled("z", "1", "web"))
	c.OnDelete("c3", labelled("q", "1", "web"))

	w, err := c.Watch(WatchOptions{From: start, Initial: true, Matches: appIs("web")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rec := &recorder{after: stopAfter(10, cancel)}
	if err := w.Run(ctx, rec, RunOptions{FirstBookmark: true}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ADDED c1|ns/a 1=web", "ADDED c1|ns/z 1=web", "ADDED c2|ns/b 1=web", "ADDED c3|ns/q 1=web",
		"BOOKMARK 5 end=true",
		"DELETED c1|ns/a 2=db", "ADDED c1|ns/x 2=web", "MODIFIED c2|ns/b 2=web", "DELETED c1|ns/z 1=web", "DELETED c3|ns/q 1=web",
	}
	if !reflect.DeepEqual(rec.sent, want) {
		t.Errorf("sent:\n%q\nwant:\n%q", rec.sent, want)
	}
	if got := w.Position().Seq; got != 11 {
		t.Errorf("position after the last event = %d, want 11", got)
	}
}

// TestWatcherClustersAndBookmarks: a watch of some clusters sends their events only, and a
// bookmark each time its ticker fires, at the newest event it has read.
func TestWatcherClustersAndBookmarks(t *testing.T) {
	c := newTestCache(100, 1<<30)
	from := c.Position()
	w, err := c.Watch(WatchOptions{From: from, Clusters: []string{"c1"}})
	if err != nil {
		t.Fatal(err)
	}
	c.OnAdd("c2", labelled("a", "1", "web"), false)
	c.OnAdd("c1", labelled("b", "1", "web"), false)
	ticks := make(chan time.Time, 1)
	ctx, cancel := context.WithCancel(context.Background())
	rec := &recorder{}
	rec.after = func(r *recorder) {
		switch len(r.sent) {
		case 1:
			ticks <- time.Time{} // caught up: the next wait sees the tick
		case 2:
			cancel()
		}
	}
	if err := w.Run(ctx, rec, RunOptions{Bookmarks: ticks}); err != nil {
		t.Fatal(err)
	}
	want := []string{"ADDED c1|ns/b 1=web", "BOOKMARK 2 end=false"}
	if !reflect.DeepEqual(rec.sent, want) {
		t.Errorf("sent %q, want %q", rec.sent, want)
	}
}

// guard is a Guard whose plan changes when told.
type guard struct {
	ch  chan struct{}
	why string
}

func (g *guard) Changed() <-chan struct{} { return g.ch }
func (g *guard) Why() string              { return g.why }

// TestWatcherEndsWhenItsPlanChanges: a watch whose Guard reports a change ends Gone, before it
// sends anything more; one whose plan changed before it started never starts.
func TestWatcherEndsWhenItsPlanChanges(t *testing.T) {
	c := newTestCache(100, 1<<30)
	w, err := c.Watch(WatchOptions{From: c.Position()})
	if err != nil {
		t.Fatal(err)
	}
	g := &guard{ch: make(chan struct{})}
	c.OnAdd("c1", labelled("a", "1", "web"), false)
	rec := &recorder{after: func(r *recorder) {
		if len(r.sent) == 1 {
			g.why = "cluster \"c1\" moved"
			close(g.ch)
		}
	}}
	err = w.Run(context.Background(), rec, RunOptions{Guard: g})
	var gone *GoneError
	if !errors.As(err, &gone) || len(rec.sent) != 1 {
		t.Fatalf("Run = %v after %q, want Gone after the one event", err, rec.sent)
	}
	// Changed before the start: nothing at all is sent, not even the initial objects.
	w, _ = c.Watch(WatchOptions{From: c.Position(), Initial: true})
	rec = &recorder{}
	if err := w.Run(context.Background(), rec, RunOptions{Guard: g, FirstBookmark: true}); !errors.As(err, &gone) || len(rec.sent) != 0 {
		t.Fatalf("Run with a changed plan = %v after %q, want Gone before anything", err, rec.sent)
	}
}

// TestWatcherHandoff: a cluster handed to another replica is never sent as deletes: a watch that
// spans it ends Gone; one that does not goes on without a word of it.
func TestWatcherHandoff(t *testing.T) {
	c := newTestCache(100, 1<<30)
	c.OnAdd("c1", labelled("a", "1", "web"), false)
	c.OnAdd("c2", labelled("b", "1", "web"), false)
	from := c.Position()
	spanning, _ := c.Watch(WatchOptions{From: from})
	other, _ := c.Watch(WatchOptions{From: from, Clusters: []string{"c2"}})
	c.OnHandoff("c1")
	c.OnUpdate("c2", nil, labelled("b", "2", "web"))

	rec := &recorder{}
	if err := spanning.Run(context.Background(), rec, RunOptions{}); !IsGone(err) || len(rec.sent) != 0 {
		t.Errorf("a watch of every cluster across a handoff: %v after %q, want Gone after nothing", err, rec.sent)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rec = &recorder{after: stopAfter(1, cancel)}
	if err := other.Run(ctx, rec, RunOptions{}); err != nil || !reflect.DeepEqual(rec.sent, []string{"MODIFIED c2|ns/b 2=web"}) {
		t.Errorf("a watch of c2 across c1's handoff: %v, sent %q", err, rec.sent)
	}
	// A watch from after the handoff spans c1 again: its return is ADDED.
	w, err := c.Watch(WatchOptions{From: c.Position()})
	if err != nil {
		t.Fatal(err)
	}
	c.OnAdd("c1", labelled("a", "1", "web"), true)
	ctx, cancel = context.WithCancel(context.Background())
	rec = &recorder{after: stopAfter(1, cancel)}
	if err := w.Run(ctx, rec, RunOptions{}); err != nil || !reflect.DeepEqual(rec.sent, []string{"ADDED c1|ns/a 1=web"}) {
		t.Errorf("after the handoff: %v, sent %q", err, rec.sent)
	}
}

// TestWatchFromGonePositions: a watch cannot open at a position of another epoch, of a merged
// answer, or one whose later events were evicted.
func TestWatchFromGonePositions(t *testing.T) {
	c := newTestCache(2, 1<<30)
	old := c.Position()
	for i := range 4 {
		c.OnAdd("c1", labelled(fmt.Sprint("o", i), "1", "web"), false)
	}
	for name, pos := range map[string]Position{
		"evicted":       old,
		"another epoch": {Epoch: "other", Seq: 1},
		"merged":        {Parts: map[string]PartPosition{"r": {RV: "x", Set: "y"}}},
	} {
		for _, initial := range []bool{false, true} {
			if _, err := c.Watch(WatchOptions{From: pos, Initial: initial}); !IsGone(err) {
				t.Errorf("%s (initial %v): %v, want Gone", name, initial, err)
			}
		}
	}
}

// TestContinueCodec: one codec for every continue token: this replica's, a merged answer's,
// and the legacy form that carried its position encoded.
func TestContinueCodec(t *testing.T) {
	pos := Position{Epoch: "e", Seq: 7}
	for _, c := range []Continue{
		{Last: "c1|ns/a", Position: pos},
		{Last: "c1|ns/a", Position: pos, Exact: true},
		{Last: "c1|ns/a", Position: pos, SortBy: "metadata.creationTimestamp", Desc: true, Sort: "22026-11-27T00:00:00Z"},
		{Last: "c2|n", Position: Position{Parts: map[string]PartPosition{"r1": {RV: pos.String(), Set: ClusterSet([]string{"c1"})}}}},
	} {
		got, err := ParseContinue(c.String())
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("round trip of %+v: %+v, %v", c, got, err)
		}
	}
	legacy := encode(map[string]any{"k": "c1|ns/a", "rv": pos.String(), "x": true})
	if got, err := ParseContinue(legacy); err != nil || !reflect.DeepEqual(got.Position, pos) || !got.Exact || got.After().Name != "a" {
		t.Errorf("legacy token: %+v, %v", got, err)
	}
	if got, err := ParseContinue(encode(map[string]any{"k": "c1|ns/a"})); err != nil || got.Epoch != "" || got.Merged() {
		t.Errorf("a token without a position (from now): %+v, %v", got, err)
	}
	for _, bad := range []string{"", "!!", encode(map[string]any{"k": "no-key"})} {
		if _, err := ParseContinue(bad); err == nil {
			t.Errorf("ParseContinue(%q) accepted", bad)
		}
	}
	// A replica of the previous release reads a token's position from rv.
	var old struct {
		RV string `json:"rv"`
	}
	if err := decode(Continue{Last: "c1|ns/a", Position: pos}.String(), &old); err != nil || old.RV != pos.String() {
		t.Errorf("a continue token without rv for the previous release: %+v %v", old, err)
	}
	for _, bad := range []string{encode(map[string]any{"p": map[string]any{}}), encode(map[string]any{"e": "x", "p": map[string]any{"r": map[string]any{"h": "s"}}})} {
		if _, err := ParsePosition(bad); err == nil {
			t.Errorf("ParsePosition(%q) accepted a position of neither or both forms", bad)
		}
	}
	if _, err := ParseSingle(Position{Parts: map[string]PartPosition{"r": {Set: "s"}}}.String()); !IsGone(err) {
		t.Errorf("ParseSingle of a merged position: %v, want Gone", err)
	}
}
