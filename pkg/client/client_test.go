package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/multicache/multicache/pkg/api"
)

func obj(name, rv string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"ns","resourceVersion":%q}}`, name, rv))
}

// daemon is a scripted stand-in for the daemon's HTTP API, enough to drive the client's
// paging, resumption and relisting; the real daemon is exercised by the e2e and chaos suites.
type daemon struct {
	mu      sync.Mutex
	lists   int
	watches []string // resourceVersions watches started from
}

func (d *daemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := r.URL.Query()
	if r.Header.Get("Authorization") != "Bearer t" {
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(api.Error{Code: 401, Reason: "Unauthorized", Message: "missing bearer token"})
		return
	}
	enc := json.NewEncoder(w)
	switch {
	case r.URL.Path == api.ClustersPath:
		_ = enc.Encode(api.Clusters{Clusters: []api.Cluster{{Name: "c1", State: "Synced"}}})
	case q.Get("watch") != "true":
		if q.Get("continue") == "" {
			d.lists++
			_ = enc.Encode(api.List{Items: []api.Item{{Cluster: "c1", Object: obj("a", "1")}}, Continue: "page2", ResourceVersion: fmt.Sprintf("list%d", d.lists)})
			return
		}
		_ = enc.Encode(api.List{Items: []api.Item{{Cluster: "c1", Object: obj("b", "1")}}, ResourceVersion: "ignored"})
	default:
		rv := q.Get("resourceVersion")
		d.watches = append(d.watches, rv)
		switch rv {
		case "list1": // an event, a bookmark, then the stream ends
			_ = enc.Encode(api.WatchEvent{Type: api.Modified, Cluster: "c1", Object: obj("a", "2")})
			_ = enc.Encode(api.WatchEvent{Type: api.Bookmark, Object: json.RawMessage(`{"kind":"Bookmark","metadata":{"resourceVersion":"bm1"}}`)})
		case "bm1": // resumed from the bookmark: a delete, then the position is gone
			_ = enc.Encode(api.WatchEvent{Type: api.Deleted, Cluster: "c1", Object: obj("b", "3")})
			_ = enc.Encode(api.WatchEvent{Type: api.ErrorEvent, Object: json.RawMessage(`{"kind":"Status","code":410,"reason":"Expired","message":"too old"}`)})
		default: // after the relist: hold the stream open
			w.(http.Flusher).Flush()
			d.mu.Unlock()
			<-r.Context().Done()
			d.mu.Lock()
		}
	}
}

type recorder struct {
	mu     sync.Mutex
	state  map[string]string
	events []string
	lists  int
}

func (r *recorder) Replace(l *api.List) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lists++
	r.state = map[string]string{}
	for _, it := range l.Items {
		var o api.ObjectMeta
		_ = json.Unmarshal(it.Object, &o)
		r.state[o.Metadata.Name] = o.Metadata.ResourceVersion
	}
}

func (r *recorder) Event(ev api.WatchEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var o api.ObjectMeta
	_ = json.Unmarshal(ev.Object, &o)
	r.events = append(r.events, ev.Type+" "+o.Metadata.Name)
	if ev.Type == api.Deleted {
		delete(r.state, o.Metadata.Name)
	} else {
		r.state[o.Metadata.Name] = o.Metadata.ResourceVersion
	}
}

// TestFollow: every page is listed, the watch starts at the list's position, a stream that
// ends resumes from its last bookmark, and a 410 makes it list again.
func TestFollow(t *testing.T) {
	d := &daemon{}
	srv := httptest.NewServer(d)
	defer srv.Close()
	c, err := New(Options{Server: srv.URL, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rec := &recorder{}
	var expired int
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Follow(ctx, "pods", Query{Limit: 1}, rec, FollowOptions{Retry: time.Millisecond, OnError: func(err error) {
			if IsExpired(err) {
				expired++
			}
		}})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d.mu.Lock()
		n := len(d.watches)
		d.mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	d.mu.Lock()
	defer d.mu.Unlock()
	if fmt.Sprint(d.watches) != "[list1 bm1 list2]" {
		t.Errorf("watches started from %v, want [list1 bm1 list2]", d.watches)
	}
	if rec.lists != 2 || expired != 1 {
		t.Errorf("%d lists and %d 410s, want 2 and 1", rec.lists, expired)
	}
	if fmt.Sprint(rec.events) != "[MODIFIED a DELETED b]" || fmt.Sprint(rec.state) != "map[a:1 b:1]" {
		t.Errorf("events %v, final state %v (the relist restores b)", rec.events, rec.state)
	}
}

func TestErrorsAndOptions(t *testing.T) {
	srv := httptest.NewServer(&daemon{})
	defer srv.Close()
	c, _ := New(Options{Server: srv.URL}) // no token
	_, err := c.Clusters(context.Background())
	var e *api.Error
	if !errors.As(err, &e) || e.Code != 401 || e.Reason != "Unauthorized" {
		t.Errorf("without a token: %v", err)
	}
	for _, bad := range []string{"ftp://x", "127.0.0.1:8080", "http://"} {
		if _, err := New(Options{Server: bad}); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
	if _, err := New(Options{CAFile: "/nonexistent"}); err == nil {
		t.Error("a missing CA file accepted")
	}
	c, _ = New(Options{Server: srv.URL, Token: "t"})
	// A resource named group/version/resource is one path segment, escaped once.
	var gotPath string
	var gotQuery url.Values
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotQuery = r.URL.EscapedPath(), r.URL.Query()
		_ = json.NewEncoder(w).Encode(api.List{})
	}))
	defer srv2.Close()
	c2, _ := New(Options{Server: srv2.URL})
	if _, err := c2.List(context.Background(), "apps/v1/deployments", Query{}, ""); err != nil || gotPath != "/multicache/v1/resources/apps%2Fv1%2Fdeployments" {
		t.Errorf("path %q (%v), want /multicache/v1/resources/apps%%2Fv1%%2Fdeployments", gotPath, err)
	}
	if _, err := c2.List(context.Background(), "pods", Query{SortBy: "metadata.creationTimestamp", Desc: true, Where: "true"}, "tok"); err != nil ||
		gotQuery.Get("sortBy") != "metadata.creationTimestamp" || gotQuery.Get("order") != "desc" || gotQuery.Get("where") != "true" || gotQuery.Get("continue") != "tok" {
		t.Errorf("a sorted list's query: %v (%v)", gotQuery, err)
	}
	l, err := c.ListAll(context.Background(), "pods", Query{Limit: 1})
	if err != nil || len(l.Items) != 2 || l.ResourceVersion == "ignored" {
		t.Errorf("ListAll: %+v %v (two pages, the first page's resourceVersion)", l, err)
	}
}

// TestWatchSummary: the summaries a stream sends reach f in order, with the query the stream
// was asked with; an ERROR event ends it with its *api.Error.
func TestWatchSummary(t *testing.T) {
	var got url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Query()
		enc := json.NewEncoder(w)
		for _, n := range []int{3, 4} {
			b, _ := json.Marshal(api.Summary{Kind: "Summary", Total: n})
			_ = enc.Encode(api.WatchEvent{Type: api.SummaryEvent, Object: b})
		}
		b, _ := json.Marshal(api.Error{Kind: "Status", Code: 410, Reason: "Expired", Message: "moved"})
		_ = enc.Encode(api.WatchEvent{Type: api.ErrorEvent, Object: b})
	}))
	defer srv.Close()
	c, _ := New(Options{Server: srv.URL})
	var totals []int
	err := c.WatchSummary(context.Background(), "pods", Query{Owner: "apps/Deployment/ns/web"}, SummaryOptions{By: []string{"cluster"}}, 250*time.Millisecond, func(s *api.Summary) error {
		totals = append(totals, s.Total)
		return nil
	})
	var e *api.Error
	if !errors.As(err, &e) || e.Code != 410 || len(totals) != 2 || totals[0] != 3 || totals[1] != 4 {
		t.Errorf("stream: totals %v, end %v; want [3 4] then the 410", totals, err)
	}
	if got.Get("watch") != "true" || got.Get("interval") != "250ms" || got.Get("by") != "cluster" || got.Get("owner") != "apps/Deployment/ns/web" {
		t.Errorf("the stream's query: %v", got)
	}
}
