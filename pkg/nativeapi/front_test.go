package nativeapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/storage"
)

// fakeReader records what the front asks and answers what the test set. It stands in for the
// storage layer only: what it answers is the front's input, not the cache's behaviour.
type fakeReader struct {
	mu      sync.Mutex
	lists   []storage.ListOptions
	gets    []storage.GetOptions
	watches []storage.WatchOptions
	sums    []storage.SummaryOptions
	scoped  map[string][]bool // per call (list, get, watch, summary): under a read scope
	// statusReads counts the reads of a replica's status that the resolution of the resource,
	// the Reader and the encoder's Info would make, each shared under a read scope.
	statusReads int

	list    *storage.List
	get     *storage.List
	err     error
	watch   *fakeWatch
	summary *storage.Summary
}

func (f *fakeReader) List(ctx context.Context, o storage.ListOptions) (*storage.List, error) {
	f.status(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("list", ctx)
	f.lists = append(f.lists, o)
	if f.err != nil {
		return nil, f.err
	}
	l := *f.list
	return &l, nil
}

func (f *fakeReader) Get(ctx context.Context, o storage.GetOptions) (*storage.List, error) {
	f.status(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("get", ctx)
	f.gets = append(f.gets, o)
	if f.err != nil {
		return nil, f.err
	}
	l := *f.get
	return &l, nil
}

func (f *fakeReader) Watch(ctx context.Context, o storage.WatchOptions) (storage.Watch, error) {
	f.status(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("watch", ctx)
	f.watches = append(f.watches, o)
	if f.err != nil {
		return nil, f.err
	}
	return f.watch, nil
}

func (f *fakeReader) Summarize(ctx context.Context, o storage.SummaryOptions) (*storage.Summary, error) {
	f.status(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("summary", ctx)
	f.sums = append(f.sums, o)
	if f.err != nil {
		return nil, f.err
	}
	s := *f.summary
	s.Groups = append([]aggregate.Group(nil), f.summary.Groups...)
	return &s, nil
}

type statusKey struct{}

// status reads the status as storage/local does: once per read scope.
func (f *fakeReader) status(ctx context.Context) {
	storage.Scoped(ctx, statusKey{}, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.statusReads++
		return true
	})
}

func (f *fakeReader) reads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statusReads
}

// record notes whether a call of what was under a read scope. Under one, a key is read once.
func (f *fakeReader) record(what string, ctx context.Context) {
	type probe struct{}
	reads := 0
	for range 2 {
		storage.Scoped(ctx, probe{}, func() bool { reads++; return true })
	}
	if f.scoped == nil {
		f.scoped = map[string][]bool{}
	}
	f.scoped[what] = append(f.scoped[what], reads < 2)
}

// fakeWatch sends its events, a bookmark, and ends with end.
type fakeWatch struct {
	fresh    []api.ClusterFreshness
	warnings []string
	events   []storage.Item
	end      error
}

func (w *fakeWatch) Freshness() []api.ClusterFreshness { return w.fresh }
func (w *fakeWatch) Warnings() []string                { return w.warnings }
func (w *fakeWatch) Run(_ context.Context, sink storage.Sink) error {
	for _, it := range w.events {
		if err := sink.Event("ADDED", it); err != nil {
			return err
		}
	}
	if err := sink.Bookmark("p-7", true); err != nil {
		return err
	}
	sink.Flush()
	return w.end
}

type fakeStatus struct{ clusters []api.Cluster }

func (s fakeStatus) Clusters(context.Context, storage.ClusterOptions) ([]api.Cluster, error) {
	return s.clusters, nil
}
func (fakeStatus) Definitions(context.Context, storage.ClusterOptions) ([]storage.Definition, error) {
	return nil, nil
}
func (fakeStatus) Resources(context.Context, storage.ClusterOptions) ([]clusterset.ClusterStatus, error) {
	return nil, nil
}

// front routes the native API as the server does, over r.
func front(t *testing.T, r *fakeReader) *httptest.Server {
	t.Helper()
	a := New(Options{Reader: r, Status: fakeStatus{clusters: []api.Cluster{{Name: "c1"}}},
		Resolve: func(ctx context.Context, name string) (string, bool) {
			r.status(ctx)
			switch name {
			case "po", "pods":
				return "pods", true
			case "configmaps":
				return "configmaps", true
			}
			return "", false
		},
		NotCached: func(name string) error {
			return apierrors.NewNotFound(schema.GroupResource{Resource: name}, "")
		},
		Info: func(ctx context.Context, _ string) map[string]clusterset.ResourceStatus {
			r.status(ctx)
			return map[string]clusterset.ResourceStatus{"c1": {Version: "v1", Kind: "ConfigMap"}}
		},
		Limits: filters.NewLimits(4, 4), RequestTimeout: time.Minute, MaxPageSize: 500,
		Watches: prometheus.NewGauge(prometheus.GaugeOpts{Name: "w"})})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /multicache/v1/clusters", a.Clusters)
	mux.HandleFunc("GET /multicache/v1/resources/{resource}", a.List)
	mux.HandleFunc("GET /multicache/v1/resources/{resource}/summary", a.Summary)
	mux.HandleFunc("GET /multicache/v1/resources/{resource}/{cluster}/{namespace}/{name}", a.Get)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return resp, []byte(b.String())
}

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "5"}, Data: map[string]string{"k": name}}
}

// TestListTranslatesTheQuery: every filter of the query reaches the Reader once, as the
// selection and list options it means; limit is capped by MaxPageSize, which is also the page
// without one; the answer carries the Reader's items, continue, total and freshness, and its
// warnings as Warning headers.
func TestListTranslatesTheQuery(t *testing.T) {
	r := &fakeReader{list: &storage.List{
		Items:           []storage.Item{{Key: aggregate.Key{Cluster: "c1", Namespace: "ns", Name: "a"}, Object: configMap("a")}},
		Continue:        "next",
		ResourceVersion: "rv-9",
		Count:           &storage.Count{Total: 42},
		Warnings:        []string{"a part said so"},
	}}
	srv := front(t, r)
	q := url.Values{
		"cluster": {"c1", "c2"}, "namespace": {"ns"}, "labelSelector": {"app=x"}, "fieldSelector": {"spec.nodeName=n1"},
		"index": {"image"}, "value": {"nginx"}, "where": {"object.metadata.name != 'b'"}, "owner": {"apps/Deployment/ns/d"},
		"limit": {"50"}, "continue": {"tok"}, "sortBy": {"metadata.name"}, "order": {"desc"},
	}
	resp, body := get(t, srv, "/multicache/v1/resources/po?"+q.Encode())
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d: %s", resp.StatusCode, body)
	}
	if len(r.lists) != 1 {
		t.Fatalf("the Reader was asked %d times", len(r.lists))
	}
	got := r.lists[0]
	want := storage.ListOptions{Selection: storage.Selection{Resource: "pods", Clusters: []string{"c1", "c2"}, LabelSelector: "app=x",
		FieldSelector: "spec.nodeName=n1", Namespace: "ns", Index: "image", Value: "nginx", Where: "object.metadata.name != 'b'", Owner: "apps/Deployment/ns/d"},
		Limit: 50, Continue: "tok", Encoding: storage.Encoding{API: storage.NativeAPI}, SortBy: "metadata.name", Desc: true, Count: true}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("the Reader was asked\n%s\nwant\n%s", gb, wb)
	}
	var l api.List
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if len(l.Items) != 1 || l.Items[0].Cluster != "c1" || l.Continue != "next" || l.ResourceVersion != "rv-9" || l.Total != 42 || l.Clusters == nil {
		t.Errorf("answer: %s", body)
	}
	if !strings.HasPrefix(string(l.Items[0].Object), `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"`) {
		t.Errorf("item: %s", l.Items[0].Object)
	}
	if w := resp.Header.Get("Warning"); !strings.Contains(w, "a part said so") {
		t.Errorf("Warning header: %q", w)
	}

	for _, tc := range []struct {
		query string
		limit int64
	}{{"", 500}, {"limit=0", 500}, {"limit=499", 499}, {"limit=501", 500}, {"limit=100000", 500}} {
		r.lists = nil
		if resp, body := get(t, srv, "/multicache/v1/resources/pods?"+tc.query); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.query, resp.StatusCode, body)
		}
		if r.lists[0].Limit != tc.limit || r.lists[0].Desc {
			t.Errorf("%q: limit %d desc %v, want %d asc", tc.query, r.lists[0].Limit, r.lists[0].Desc, tc.limit)
		}
	}
}

// TestBadQueriesNameTheParameter: each bad request is a 400 (404 for a resource not cached)
// whose Status names what is wrong, and never reaches the Reader.
func TestBadQueriesNameTheParameter(t *testing.T) {
	r := &fakeReader{list: &storage.List{}, get: &storage.List{}, summary: &storage.Summary{}}
	srv := front(t, r)
	for _, tc := range []struct {
		path string
		code int
		says string
	}{
		{"/multicache/v1/resources/widgets", 404, "widgets"},
		{"/multicache/v1/resources/widgets/summary?by=cluster", 404, "widgets"},
		{"/multicache/v1/resources/widgets/c1/ns/a", 404, "widgets"},
		{"/multicache/v1/resources/pods?index=image", 400, "value is required"},
		{"/multicache/v1/resources/pods?value=x", 400, "value: given without index"},
		{"/multicache/v1/resources/pods?limit=-1", 400, "limit"},
		{"/multicache/v1/resources/pods?limit=ten", 400, "limit"},
		{"/multicache/v1/resources/pods?timeoutSeconds=x&watch=true", 400, "timeoutSeconds"},
		{"/multicache/v1/resources/pods?sortBy=metadata.name&order=up", 400, `order "up"`},
		{"/multicache/v1/resources/pods?order=desc", 400, "order: given without sortBy"},
		{"/multicache/v1/resources/pods/summary?by=cluster&sort=size", 400, `sort "size"`},
		{"/multicache/v1/resources/pods/summary?by=cluster&interval=soon&watch=true", 400, `interval "soon"`},
		{"/multicache/v1/resources/pods/summary?by=cluster&interval=1ms&watch=true", 400, "at least 100ms"},
		{"/multicache/v1/resources/pods/summary?by=cluster&interval=2s", 400, "interval: given without watch=true"},
		{"/multicache/v1/resources/pods/summary?by=cluster&continue=x", 400, "continue"},
		{"/multicache/v1/resources/pods/-bad-/ns/a", 400, "-bad-"},
	} {
		resp, body := get(t, srv, tc.path)
		var st metav1.Status
		_ = json.Unmarshal(body, &st)
		if resp.StatusCode != tc.code || int(st.Code) != tc.code || !strings.Contains(st.Message, tc.says) {
			t.Errorf("%s: %d %s, want %d naming %q", tc.path, resp.StatusCode, body, tc.code, tc.says)
		}
	}
	if len(r.lists)+len(r.gets)+len(r.sums)+len(r.watches) != 0 {
		t.Errorf("bad requests reached the Reader: %d lists, %d gets, %d summaries, %d watches", len(r.lists), len(r.gets), len(r.sums), len(r.watches))
	}
}

// TestReaderErrorsKeepTheirStatus: the Reader's refusal is the answer's status, with its
// Retry-After, for a list, a get, a summary and a watch that has not started.
func TestReaderErrorsKeepTheirStatus(t *testing.T) {
	for _, err := range []error{
		apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", nil),
		apierrors.NewTooManyRequests("cluster c1 is not complete here", 3),
		apierrors.NewServiceUnavailable("replica r2 unreachable"),
		apierrors.NewResourceExpired("too old"),
	} {
		r := &fakeReader{err: err}
		srv := front(t, r)
		want := storage.StatusOf(err).ErrStatus
		for _, path := range []string{"/multicache/v1/resources/pods", "/multicache/v1/resources/pods/c1/ns/a",
			"/multicache/v1/resources/pods/summary?by=cluster", "/multicache/v1/resources/pods?watch=true"} {
			resp, body := get(t, srv, path)
			var st metav1.Status
			_ = json.Unmarshal(body, &st)
			if resp.StatusCode != int(want.Code) || st.Reason != want.Reason || st.Message != want.Message {
				t.Errorf("%s, Reader said %v: %d %s", path, err, resp.StatusCode, body)
			}
			if ra := resp.Header.Get("Retry-After"); (want.Code == http.StatusTooManyRequests) != (ra == "3") {
				t.Errorf("%s, Reader said %v: Retry-After %q", path, err, ra)
			}
		}
	}
}

// TestGet: one object as an api.Item with its type and its answer's warnings; none found is
// 404 that says whether the cluster serves the resource here.
func TestGet(t *testing.T) {
	r := &fakeReader{get: &storage.List{Items: []storage.Item{{Key: aggregate.Key{Cluster: "c1", Namespace: "ns", Name: "a"}, Object: configMap("a")}},
		Freshness: []api.ClusterFreshness{{Name: "c1", Synced: true}}, Warnings: []string{"a part said so"}}}
	srv := front(t, r)
	resp, body := get(t, srv, "/multicache/v1/resources/configmaps/c1/ns/a")
	var it api.Item
	if err := json.Unmarshal(body, &it); err != nil || resp.StatusCode != 200 || it.Cluster != "c1" || !strings.HasPrefix(string(it.Object), `{"kind":"ConfigMap","apiVersion":"v1",`) {
		t.Fatalf("%d %s (%v)", resp.StatusCode, body, err)
	}
	if w := resp.Header.Get("Warning"); !strings.Contains(w, "a part said so") {
		t.Errorf("Warning header: %q", w)
	}
	want := storage.GetOptions{Selection: storage.Selection{Resource: "configmaps", Clusters: []string{"c1"}, Namespace: "ns"}, Name: "a",
		Encoding: storage.Encoding{API: storage.NativeAPI, TypeMeta: true}}
	gb, _ := json.Marshal(r.gets[0])
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("the Reader was asked %s, want %s", gb, wb)
	}
	// "_" is a cluster-scoped object's namespace.
	if get(t, srv, "/multicache/v1/resources/configmaps/c1/_/a"); r.gets[1].Namespace != "" {
		t.Errorf("_ reached the Reader as namespace %q", r.gets[1].Namespace)
	}
	for _, tc := range []struct {
		fresh []api.ClusterFreshness
		says  string
	}{
		{[]api.ClusterFreshness{{Name: "c1", Synced: true}}, `configmaps "ns/a" not found in cluster "c1"`},
		{[]api.ClusterFreshness{{Name: "c1", NotServed: true}}, `cluster "c1" does not serve configmaps here`},
		{[]api.ClusterFreshness{{Name: "c1", Error: "unknown cluster"}}, `cluster "c1" does not serve configmaps here`},
		{nil, `cluster "c1" does not serve configmaps here`},
	} {
		r.get = &storage.List{Freshness: tc.fresh}
		resp, body := get(t, srv, "/multicache/v1/resources/configmaps/c1/ns/a")
		if resp.StatusCode != 404 || !strings.Contains(string(body), strings.ReplaceAll(tc.says, `"`, `\"`)) {
			t.Errorf("%+v: %d %s, want 404 saying %s", tc.fresh, resp.StatusCode, body, tc.says)
		}
	}
}

// TestWatchStream: a watch asks the Reader for the initial objects and bookmarks unless told
// otherwise, streams NDJSON events with their cluster and type, a BOOKMARK, and ends with an
// ERROR: the Reader's refusal as it is, 410 for anything that is not one.
func TestWatchStream(t *testing.T) {
	w := &fakeWatch{
		fresh:    []api.ClusterFreshness{{Name: "c1", Synced: true}, {Name: "c2", Error: "unavailable: no live replica"}},
		warnings: []string{"a part said so"},
		events:   []storage.Item{{Key: aggregate.Key{Cluster: "c1", Namespace: "ns", Name: "a"}, Object: configMap("a")}},
		end:      apierrors.NewServiceUnavailable("replica r2 went away"),
	}
	r := &fakeReader{watch: w}
	srv := front(t, r)
	resp, body := get(t, srv, "/multicache/v1/resources/configmaps?watch=true&labelSelector=app%3Dx")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	ws := strings.Join(resp.Header.Values("Warning"), "\n")
	if !strings.Contains(ws, "a part said so") || !strings.Contains(ws, "1 clusters with no live replica to own them (this watch ends with 410 when one does): c2") {
		t.Errorf("Warning headers: %s", ws)
	}
	o := r.watches[0]
	if o.Resource != "configmaps" || o.LabelSelector != "app=x" || !o.Initial || !o.StartBookmark || !o.Bookmarks || o.ResourceVersion != "" || !o.Encoding.TypeMeta {
		t.Errorf("the Reader was asked %+v", o)
	}
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines: %s", len(lines), body)
	}
	var ev [3]api.WatchEvent
	for i, line := range lines {
		if err := json.Unmarshal([]byte(line), &ev[i]); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, line)
		}
	}
	if ev[0].Type != "ADDED" || ev[0].Cluster != "c1" || !strings.HasPrefix(string(ev[0].Object), `{"kind":"ConfigMap"`) {
		t.Errorf("event: %s", lines[0])
	}
	var bm api.BookmarkObject
	if _ = json.Unmarshal(ev[1].Object, &bm); ev[1].Type != api.Bookmark || bm.Metadata.ResourceVersion != "p-7" {
		t.Errorf("bookmark: %s", lines[1])
	}
	var st api.Error
	if _ = json.Unmarshal(ev[2].Object, &st); ev[2].Type != api.ErrorEvent || st.Code != http.StatusGone || !strings.Contains(st.Message, "replica r2 went away") {
		t.Errorf("a 503 that ends a running watch: %s, want 410 that keeps its message", lines[2])
	}

	// A position resumes without the initial objects; bookmarks can be declined; a refusal
	// ends the stream as it is.
	w.end = apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", nil)
	_, body = get(t, srv, "/multicache/v1/resources/configmaps?watch=true&resourceVersion=p-3&allowWatchBookmarks=false")
	o = r.watches[1]
	if o.Initial || o.StartBookmark || o.Bookmarks || o.ResourceVersion != "p-3" {
		t.Errorf("the Reader was asked %+v", o)
	}
	lines = strings.Split(strings.TrimSpace(string(body)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &ev[2]); err != nil {
		t.Fatal(err)
	}
	if _ = json.Unmarshal(ev[2].Object, &st); st.Code != http.StatusForbidden {
		t.Errorf("a 403 that ends a running watch: %s", lines[len(lines)-1])
	}
	w.end = nil
	if _, body = get(t, srv, "/multicache/v1/resources/configmaps?watch=true&resourceVersion=0"); strings.Contains(string(body), "ERROR") || !r.watches[2].Initial {
		t.Errorf("a watch that ends cleanly from rv 0: %s (initial %v)", body, r.watches[2].Initial)
	}
}

// TestSummary: by keys split on commas and repeated reach the Reader; groups come back sorted
// by count (most first, then key) or by key, cut to limit, with every key named in each.
func TestSummary(t *testing.T) {
	s := func(v string) *string { return &v }
	sum := &storage.Summary{Warnings: []string{"counted from a part"}}
	sum.By = []string{"cluster", "label:tier"}
	sum.Total = 9
	sum.Groups = []aggregate.Group{
		{Key: []*string{s("c1"), s("web")}, Count: 2},
		{Key: []*string{s("c2"), nil}, Count: 4},
		{Key: []*string{s("c1"), s("db")}, Count: 3},
	}
	r := &fakeReader{summary: sum}
	srv := front(t, r)
	for _, tc := range []struct {
		query string
		want  []int
	}{{"", []int{4, 3, 2}}, {"&sort=key", []int{3, 2, 4}}, {"&limit=2", []int{4, 3}}, {"&sort=key&limit=1", []int{3}}} {
		resp, body := get(t, srv, "/multicache/v1/resources/pods/summary?by=cluster,label:tier&namespace=ns"+tc.query)
		var out api.Summary
		if err := json.Unmarshal(body, &out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", tc.query, resp.StatusCode, body)
		}
		var counts []int
		for _, g := range out.Groups {
			counts = append(counts, g.Count)
			if _, ok := g.Key["label:tier"]; !ok || g.Key["cluster"] == nil {
				t.Errorf("%s: group key %v", tc.query, g.Key)
			}
		}
		if out.Kind != "Summary" || out.Total != 9 || out.Clusters == nil || !slices.Equal(counts, tc.want) {
			t.Errorf("%s: %s, want counts %v", tc.query, body, tc.want)
		}
		if !strings.Contains(resp.Header.Get("Warning"), "counted from a part") {
			t.Errorf("%s: Warning %q", tc.query, resp.Header.Get("Warning"))
		}
	}
	last := r.sums[len(r.sums)-1]
	if last.Resource != "pods" || last.Namespace != "ns" || strings.Join(last.By, "|") != "cluster|label:tier" {
		t.Errorf("the Reader was asked %+v", last)
	}
	get(t, srv, "/multicache/v1/resources/pods/summary?by=cluster&by=namespace")
	if last = r.sums[len(r.sums)-1]; strings.Join(last.By, "|") != "cluster|namespace" {
		t.Errorf("repeated by: %v", last.By)
	}
}

// TestSummaryNeedsASummarizer: a Reader that cannot summarize is 501, not a crash.
func TestSummaryNeedsASummarizer(t *testing.T) {
	a := New(Options{Reader: listOnly{}, Resolve: func(context.Context, string) (string, bool) { return "pods", true },
		Limits: filters.NewLimits(1, 1), RequestTimeout: time.Minute})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/multicache/v1/resources/pods/summary?by=cluster", nil)
	req.SetPathValue("resource", "pods")
	a.Summary(rec, req)
	if rec.Code != http.StatusNotImplemented {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
}

type listOnly struct{ storage.Reader }

func TestClusters(t *testing.T) {
	srv := front(t, &fakeReader{})
	resp, body := get(t, srv, "/multicache/v1/clusters")
	var cl api.Clusters
	if err := json.Unmarshal(body, &cl); err != nil || resp.StatusCode != 200 || len(cl.Clusters) != 1 || cl.Clusters[0].Name != "c1" {
		t.Errorf("%d %s (%v)", resp.StatusCode, body, err)
	}
}

// TestReadsUnderOneScope: a list, a get and a summary each read under a read scope of their
// own, from the resolution of the resource on, so that the resolution, every read of this
// replica's part and the encoder's kinds share one read of its status; a watch, and a
// summary's stream, never do (what they would share would be held, and stale, for as long as
// they run).
func TestReadsUnderOneScope(t *testing.T) {
	r := &fakeReader{list: &storage.List{Items: []storage.Item{{Key: aggregate.Key{Cluster: "c1", Namespace: "ns", Name: "a"}, Object: configMap("a")}}},
		get:   &storage.List{Items: []storage.Item{{Key: aggregate.Key{Cluster: "c1", Namespace: "ns", Name: "a"}, Object: configMap("a")}}},
		watch: &fakeWatch{events: []storage.Item{{Key: aggregate.Key{Cluster: "c1", Namespace: "ns", Name: "a"}, Object: configMap("a")}}}, summary: &storage.Summary{}}
	srv := front(t, r)
	for _, tc := range []struct {
		path  string
		reads int // of the status, by the request
	}{
		{"/multicache/v1/resources/configmaps", 1},         // the resolution's, the list's and the encoder's
		{"/multicache/v1/resources/configmaps/c1/ns/a", 1}, // the resolution's, the get's and the encoder's
		{"/multicache/v1/resources/configmaps/summary?by=cluster", 1},
		{"/multicache/v1/resources/configmaps?watch=true", 3}, // the resolution's; the watch's and its encoder's, each its own
	} {
		before := r.reads()
		if resp, body := get(t, srv, tc.path); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d: %s", tc.path, resp.StatusCode, body)
		}
		if n := r.reads() - before; n != tc.reads {
			t.Errorf("%s: the status was read %d times, want %d", tc.path, n, tc.reads)
		}
	}
	if resp, body := get(t, srv, "/multicache/v1/resources/configmaps/summary?by=cluster&watch=true&timeoutSeconds=1"); resp.StatusCode != http.StatusOK {
		t.Fatalf("summary stream: %d: %s", resp.StatusCode, body)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for what, want := range map[string][]bool{"list": {true}, "get": {true}} {
		if got := r.scoped[what]; !slices.Equal(got, want) {
			t.Errorf("%s under a read scope: %v, want %v", what, got, want)
		}
	}
	if w := r.scoped["watch"]; len(w) == 0 || slices.Contains(w, true) {
		t.Errorf("watches (the list's and the summary stream's) under a read scope: %v, want none", w)
	}
	sums := r.scoped["summary"]
	if len(sums) < 2 || !sums[0] || slices.Contains(sums[1:], true) {
		t.Errorf("summaries under a read scope: %v, want the plain one's only (then the stream's, none)", sums)
	}
}
