package server

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/watchcache"
)

// staticFleet is a Fleet whose owners a test sets.
type staticFleet struct {
	owners []shard.Owner
	change chan struct{}
}

func (f *staticFleet) Identity() string            { return "me" }
func (f *staticFleet) Owners() []shard.Owner       { return f.owners }
func (f *staticFleet) WaitChange() <-chan struct{} { return f.change }

func TestPlanAndFleetTokens(t *testing.T) {
	fl := &staticFleet{owners: []shard.Owner{
		{Cluster: "a", Holder: "me", Self: true, Live: true},
		{Cluster: "b", Holder: "p2", URL: "http://p2/", Live: true},
		{Cluster: "c", Holder: "p2", URL: "http://p2", Live: true},
		{Cluster: "d", Holder: "p3", URL: "http://p3", Live: false},
		{Cluster: "e"},
	}}
	s := &Server{opts: Options{Fleet: fl}}
	pl := s.plan(nil)
	if len(pl.parts) != 2 || !pl.parts[0].self || pl.parts[1].peer != "p2" || !slices.Equal(pl.parts[1].clusters, []string{"b", "c"}) || pl.parts[1].url != "http://p2" {
		t.Fatalf("parts: %+v", pl.parts)
	}
	if len(pl.down) != 2 || pl.down["d"] == "" || pl.down["e"] == "" || pl.local() {
		t.Fatalf("down: %v, local %v", pl.down, pl.local())
	}
	if only := s.plan(func(c string) bool { return c == "a" }); !only.local() {
		t.Fatalf("a plan of this replica's cluster only must be local: %+v", only)
	}

	// A token resumes the same plan; once a cluster moves, it does not.
	tok := watchcache.Position{Parts: map[string]watchcache.PartPosition{}}
	for _, p := range pl.parts {
		tok.Parts[p.peer] = watchcache.PartPosition{RV: "rv-" + p.peer, Set: p.set()}
	}
	parsed, ok := parseMerged(tok.String())
	if !ok || resumable(parsed, pl) != nil {
		t.Fatalf("a token of the plan does not resume it: %v %v", ok, resumable(parsed, pl))
	}
	if rv, ok := partPosition(parsed, pl.parts[1]); !ok || rv != "rv-p2" {
		t.Fatalf("position of p2: %q %v", rv, ok)
	}
	fl.owners[2] = shard.Owner{Cluster: "c", Holder: "me", Self: true, Live: true}
	if why := s.moved(pl); why == "" {
		t.Fatal("c moved from p2 to me: moved says nothing")
	}
	if err := resumable(parsed, s.plan(nil)); err == nil {
		t.Fatal("a token from before c moved resumes the new plan")
	}
	if _, ok := parseMerged(watchcache.Position{Epoch: "x", Seq: 3}.String()); ok {
		t.Fatal("a single replica's token parsed as a fleet token")
	}
}

// TestServeInProcessStreams: the in-process answer starts when the handler writes its header,
// streams what it writes, and ends the handler when the reader goes away.
func TestServeInProcessStreams(t *testing.T) {
	ended := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		w.Header().Set("X-Test", "1")
		w.WriteHeader(http.StatusTeapot)
		for i := 0; ; i++ {
			if _, err := w.Write([]byte("line\n")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
	})
	resp := serveInProcess(h, httptest.NewRequest(http.MethodGet, "/", nil))
	if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-Test") != "1" {
		t.Fatalf("got %d %v", resp.StatusCode, resp.Header)
	}
	sc := bufio.NewScanner(resp.Body)
	for range 3 {
		if !sc.Scan() || sc.Text() != "line" {
			t.Fatalf("stream: %q %v", sc.Text(), sc.Err())
		}
	}
	_ = resp.Body.Close()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler went on writing after the reader closed")
	}
	// A handler that returns without writing answers 200 and an empty body.
	resp = serveInProcess(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), httptest.NewRequest(http.MethodGet, "/", nil))
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || len(b) != 0 {
		t.Fatalf("empty handler: %d %q", resp.StatusCode, b)
	}
}
