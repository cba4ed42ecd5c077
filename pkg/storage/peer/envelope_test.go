package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/storage"
)

// fakeReader is a replica's Reader: it answers what the test sets, and records what it was
// asked.
type fakeReader struct {
	mu     sync.Mutex
	lists  []storage.ListOptions
	list   func(storage.ListOptions) (*storage.List, error)
	events func(ctx context.Context, sink storage.Sink) error
}

func (f *fakeReader) List(_ context.Context, opts storage.ListOptions) (*storage.List, error) {
	f.mu.Lock()
	f.lists = append(f.lists, opts)
	f.mu.Unlock()
	return f.list(opts)
}

func (f *fakeReader) Get(_ context.Context, opts storage.GetOptions) (*storage.List, error) {
	return f.list(storage.ListOptions{Selection: opts.Selection})
}

func (f *fakeReader) Watch(context.Context, storage.WatchOptions) (storage.Watch, error) {
	return fakeWatch{run: f.events}, nil
}

type fakeWatch struct {
	run func(ctx context.Context, sink storage.Sink) error
}

func (fakeWatch) Freshness() []api.ClusterFreshness {
	return []api.ClusterFreshness{{Name: "a", Synced: true}}
}
func (fakeWatch) Warnings() []string { return []string{"w"} }
func (w fakeWatch) Run(ctx context.Context, sink storage.Sink) error {
	return w.run(ctx, sink)
}

// jsonEncoder writes an item as {"key":…,"rv":…}: what it is matters less than that it
// arrives as written.
type jsonEncoder struct{}

func (jsonEncoder) Append(buf *bytes.Buffer, it storage.Item, rv string) error {
	return json.NewEncoder(buf).Encode(map[string]string{"key": it.Key.String(), "rv": rv, "obj": fmt.Sprint(it.Object)})
}

func encoders(context.Context, storage.Encoding, string) (storage.Encoder, error) {
	return jsonEncoder{}, nil
}

// errStream yields items, then fails with err.
type errStream struct {
	items []storage.Item
	err   error
}

func (s *errStream) Next() (storage.Item, bool, error) {
	if len(s.items) == 0 {
		return storage.Item{}, false, s.err
	}
	it := s.items[0]
	s.items = s.items[1:]
	return it, true, nil
}
func (s *errStream) Close() {}

func serveReader(t *testing.T, r storage.Reader) *Client {
	t.Helper()
	hs := httptest.NewServer(&Handler{Reader: r, Encoders: encoders})
	t.Cleanup(hs.Close)
	return &Client{ID: "p2", URL: hs.URL, Clients: NewClients(nil, 5*time.Second), Timeout: 5 * time.Second}
}

func key(c, name string) aggregate.Key { return aggregate.Key{Cluster: c, Namespace: "ns", Name: name} }

// TestEnvelopeListRoundTrip: a list's head (position, continue, freshness of many clusters,
// warnings, count) and items (keys, positions, sort values with spaces and newlines, objects as
// encoded) arrive as the replica answered; a
// part narrowed to no cluster stays narrowed to none (not "every cluster"), and an
// unnarrowed selection stays unnarrowed.
func TestEnvelopeListRoundTrip(t *testing.T) {
	var fresh []api.ClusterFreshness
	for i := range 5000 { // a head far larger than one read buffer
		fresh = append(fresh, api.ClusterFreshness{Name: fmt.Sprintf("cluster-%04d", i), Synced: true, Error: strings.Repeat("x", 40)})
	}
	fr := &fakeReader{list: func(storage.ListOptions) (*storage.List, error) {
		return &storage.List{ResourceVersion: "rv1", Epoch: "e1", Continue: "c1", Freshness: fresh, Warnings: []string{"careful"}, Count: &storage.Count{Total: 12, Before: 3},
			Items: []storage.Item{{Key: key("a", "x"), Object: "X", Seq: 7}, {Key: key("b", "y"), Object: "Y", Seq: 9, Sort: "2a b\n\x00c"}}}, nil
	}}
	c := serveReader(t, fr)
	for _, part := range [][]string{nil, {}, {"a", "b"}} {
		l, err := c.List(context.Background(), storage.ListOptions{Selection: storage.Selection{Resource: "pods", Part: part}, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if err := storage.Drain(l); err != nil {
			t.Fatal(err)
		}
		if l.ResourceVersion != "rv1" || l.Epoch != "e1" || l.Continue != "c1" || len(l.Freshness) != 5000 || l.Freshness[4999].Name != "cluster-4999" || len(l.Warnings) != 1 {
			t.Errorf("head: rv %q epoch %q continue %q, %d freshness, warnings %v", l.ResourceVersion, l.Epoch, l.Continue, len(l.Freshness), l.Warnings)
		}
		if len(l.Items) != 2 || l.Items[0].Key != key("a", "x") || l.Items[1].Key != key("b", "y") {
			t.Fatalf("items: %+v", l.Items)
		}
		if l.Items[0].Sort != "" || l.Items[1].Sort != "2a b\n\x00c" || l.Count == nil || *l.Count != (storage.Count{Total: 12, Before: 3}) {
			t.Errorf("sort values %q, %q and count %+v: not as answered", l.Items[0].Sort, l.Items[1].Sort, l.Count)
		}
		var obj map[string]string
		if err := json.Unmarshal(l.Items[1].Raw, &obj); err != nil || obj["obj"] != "Y" || obj["key"] != key("b", "y").String() {
			t.Errorf("second item's object: %s", l.Items[1].Raw)
		}
		fr.mu.Lock()
		got := fr.lists[len(fr.lists)-1].Part
		fr.mu.Unlock()
		if (got == nil) != (part == nil) || len(got) != len(part) {
			t.Errorf("part %#v arrived as %#v", part, got)
		}
	}
}

// TestEnvelopeFailureAfterTheHead: a list that fails after it started ends with the
// replica's Status, which the caller's stream returns; a watch's ERROR is Run's error.
func TestEnvelopeFailureAfterTheHead(t *testing.T) {
	fr := &fakeReader{
		list: func(storage.ListOptions) (*storage.List, error) {
			return &storage.List{ResourceVersion: "rv", More: &errStream{items: []storage.Item{{Key: key("a", "x"), Object: 1}}, err: storage.Error(http.StatusGone, "gone meanwhile")}}, nil
		},
		events: func(_ context.Context, sink storage.Sink) error {
			_ = sink.Event("ADDED", storage.Item{Key: key("a", "x"), Object: 1, RV: "p1"})
			_ = sink.Bookmark("p2", true)
			return storage.Error(http.StatusGone, "plan changed")
		},
	}
	c := serveReader(t, fr)
	l, err := c.List(context.Background(), storage.ListOptions{Selection: storage.Selection{Resource: "pods"}})
	if err != nil {
		t.Fatal(err)
	}
	err = storage.Drain(l)
	if storage.Code(err) != http.StatusGone || !strings.Contains(err.Error(), "gone meanwhile") || len(l.Items) != 1 {
		t.Errorf("a list failing after one item: %d items, %v", len(l.Items), err)
	}
	w, err := c.Watch(context.Background(), storage.WatchOptions{Selection: storage.Selection{Resource: "pods"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Freshness()) != 1 || len(w.Warnings()) != 1 {
		t.Errorf("watch head: %v %v", w.Freshness(), w.Warnings())
	}
	rec := &recordSink{}
	err = w.Run(context.Background(), rec)
	if storage.Code(err) != http.StatusGone || !strings.Contains(err.Error(), "plan changed") {
		t.Errorf("watch end: %v", err)
	}
	if want := []string{"ADDED a|ns/x p1", "BOOKMARK p2 true"}; fmt.Sprint(rec.got) != fmt.Sprint(want) {
		t.Errorf("watch stream %v, want %v", rec.got, want)
	}
}

type recordSink struct{ got []string }

func (s *recordSink) Event(typ string, it storage.Item) error {
	s.got = append(s.got, typ+" "+it.Key.String()+" "+it.RV)
	return nil
}
func (s *recordSink) Bookmark(rv string, end bool) error {
	s.got = append(s.got, fmt.Sprintf("BOOKMARK %s %v", rv, end))
	return nil
}
func (s *recordSink) Flush() {}

// TestPeerReadTimeout (D8): a replica that sends its headers and then nothing more fails the
// read within the timeout, with 503 naming the setting; one that keeps sending is never cut.
func TestPeerReadTimeout(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(ProtocolHeader, ProtocolVersion)
		_, _ = io.WriteString(w, "h {\"rv\":\"x\"}\ni 2 - a|ns/x\n{}\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(stall.Close)
	c := &Client{ID: "p2", URL: stall.URL, Clients: NewClients(nil, 5*time.Second), Timeout: 300 * time.Millisecond}
	l, err := c.List(context.Background(), storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = storage.Drain(l)
	if took := time.Since(start); apierrors.ReasonForError(err) != "ServiceUnavailable" || !strings.Contains(err.Error(), "sharding.peerTimeout") || took > 5*time.Second {
		t.Errorf("a stalled answer: %v after %s", err, took)
	}
	if len(l.Items) != 1 {
		t.Errorf("the item before the stall: %d", len(l.Items))
	}

	// Slow but steady: an item every 100ms, each read well within the timeout (one second, to
	// leave a starved CPU room), 1.5s in all.
	steady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(ProtocolHeader, ProtocolVersion)
		_, _ = io.WriteString(w, "h {}\n")
		for i := range 15 {
			fmt.Fprintf(w, "i 2 - a|ns/x%02d\n{}\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
		_, _ = io.WriteString(w, "e\n")
	}))
	t.Cleanup(steady.Close)
	c.URL, c.Timeout = steady.URL, time.Second
	if l, err = c.List(context.Background(), storage.ListOptions{}); err == nil {
		err = storage.Drain(l)
	}
	if err != nil || len(l.Items) != 15 {
		t.Errorf("a slow, steady answer: %v", err)
	}
}

// TestAnswerErrors: a replica's refusal of the caller is the caller's answer; its refusal of
// this replica, its failure, and any answer of a replica that does not speak the envelope (of
// another release, during a rolling update) is 503; a 429 or 503 always says when to retry.
func TestAnswerErrors(t *testing.T) {
	for _, tc := range []struct {
		code     int
		protocol bool
		want     int
	}{
		{http.StatusForbidden, true, http.StatusForbidden},
		{http.StatusGone, true, http.StatusGone},
		{http.StatusNotFound, true, http.StatusNotFound},
		{http.StatusNotFound, false, http.StatusServiceUnavailable}, // a replica of another release
		{http.StatusMethodNotAllowed, false, http.StatusServiceUnavailable},
		{http.StatusTooManyRequests, false, http.StatusServiceUnavailable},
		{http.StatusUnauthorized, false, http.StatusServiceUnavailable},
		{http.StatusUnauthorized, true, http.StatusServiceUnavailable},
		{http.StatusInternalServerError, true, http.StatusServiceUnavailable},
		{http.StatusTooManyRequests, true, http.StatusTooManyRequests},
	} {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tc.protocol {
				w.Header().Set(ProtocolHeader, ProtocolVersion)
			}
			w.WriteHeader(tc.code)
			_, _ = io.WriteString(w, "the replica's words")
		}))
		c := &Client{ID: "p2", URL: hs.URL, Clients: NewClients(nil, time.Second)}
		_, err := c.List(context.Background(), storage.ListOptions{})
		hs.Close()
		got := storage.Code(err)
		retry := storage.RetryAfter(err)
		if got != tc.want || ((got == 429 || got == 503) && retry == 0) || !strings.Contains(err.Error(), "the replica's words") {
			t.Errorf("%d (envelope %v): %d retry %d %v; want %d", tc.code, tc.protocol, got, retry, err, tc.want)
		}
	}
}

// TestCallsCarryNoCredentials: a call sends no Authorization, asks for identity encoding, and
// names the envelope's version.
func TestCallsCarryNoCredentials(t *testing.T) {
	var got http.Header
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set(ProtocolHeader, ProtocolVersion)
		_, _ = io.WriteString(w, "h {}\ne\n")
	}))
	t.Cleanup(hs.Close)
	c := &Client{ID: "p2", URL: hs.URL, Clients: NewClients(nil, time.Second)}
	l, err := c.List(context.Background(), storage.ListOptions{})
	if err == nil {
		err = storage.Drain(l)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got.Get("Authorization") != "" || got.Get("Accept-Encoding") != "identity" || got.Get(ProtocolHeader) != ProtocolVersion {
		t.Errorf("headers sent: %v", got)
	}
}

// TestOtherProtocolVersionsRefuse: replicas of envelope versions the other does not speak
// refuse each other's calls with a 503 to retry, both ways: an answer of version 2, even a 200,
// is never read (version 2 ignores the where filter), nor is a 200 of another version than the
// call's (read as the call's, it would be misread), and a call of version 2, 5 or none is not
// answered.
func TestOtherProtocolVersionsRefuse(t *testing.T) {
	for _, v := range []string{"2", OldestProtocolVersion} {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(ProtocolHeader, v)
			w.Header().Set("Content-Type", "application/x-multicache-peer")
			_, _ = io.WriteString(w, "h {}\n")
		}))
		c := &Client{ID: "p2", URL: hs.URL, Clients: NewClients(nil, time.Second)}
		_, err := c.List(context.Background(), storage.ListOptions{})
		hs.Close()
		if storage.Code(err) != http.StatusServiceUnavailable || storage.RetryAfter(err) == 0 || !strings.Contains(err.Error(), fmt.Sprintf("peer protocol %q", v)) {
			t.Errorf("a 200 of protocol %s to a call of %s: %v (%d), want a 503 to retry naming the version", v, ProtocolVersion, err, storage.Code(err))
		}
	}

	h := &Handler{}
	for _, v := range []string{"", "2", "5"} {
		req := httptest.NewRequest(http.MethodPost, ListPath, strings.NewReader("{}"))
		if v != "" {
			req.Header.Set(ProtocolHeader, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || rec.Header().Get(ProtocolHeader) != ProtocolVersion ||
			rec.Header().Get(NewestProtocolHeader) != ProtocolVersion {
			t.Errorf("a call of protocol %q: %d %v, want 503 with Retry-After and this version's headers", v, rec.Code, rec.Header())
		}
	}
}
