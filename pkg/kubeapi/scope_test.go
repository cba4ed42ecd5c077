package kubeapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/kubeapi/discovery"
	"github.com/multicache/multicache/pkg/storage"
)

// statusReads stands in for this replica's status of its clusters, read under the request's
// read scope where there is one, as storage/local reads it: reads counts the reads made, by
// who made them (the catalog, the Reader).
type statusReads struct {
	mu    sync.Mutex
	reads map[string]int
}

type statusKey struct{}

func (s *statusReads) read(ctx context.Context, who string) []clusterset.ClusterStatus {
	return storage.Scoped(ctx, statusKey{}, func() []clusterset.ClusterStatus {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.reads[who]++
		return []clusterset.ClusterStatus{{Name: "c1", State: clusterset.Synced, Resources: []clusterset.ResourceStatus{{
			Resource: "configmaps", Version: "v1", Kind: "ConfigMap", Plural: "configmaps", Singular: "configmap", Namespaced: true, State: clusterset.Synced}}}}
	})
}

func (s *statusReads) count() (catalog, reader int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads["catalog"], s.reads["reader"]
}

// scopeReader reads the status in every call, as a Reader over this replica's part does.
type scopeReader struct{ st *statusReads }

func (r scopeReader) List(ctx context.Context, _ storage.ListOptions) (*storage.List, error) {
	r.st.read(ctx, "reader")
	r.st.read(ctx, "reader") // a second read of the part: the count of a page, a second round
	return &storage.List{ResourceVersion: "1"}, nil
}

func (r scopeReader) Get(ctx context.Context, _ storage.GetOptions) (*storage.List, error) {
	r.st.read(ctx, "reader")
	r.st.read(ctx, "reader")
	return &storage.List{ResourceVersion: "1"}, nil
}

func (r scopeReader) Watch(ctx context.Context, _ storage.WatchOptions) (storage.Watch, error) {
	r.st.read(ctx, "reader")
	r.st.read(ctx, "reader")
	return emptyWatch{}, nil
}

type emptyWatch struct{}

func (emptyWatch) Freshness() []api.ClusterFreshness       { return nil }
func (emptyWatch) Warnings() []string                      { return nil }
func (emptyWatch) Run(context.Context, storage.Sink) error { return nil }

// TestListReadsTheStatusOnce: a list reads the status of this replica's clusters once, for its
// catalog and every read of its part, under the request's read scope; a get too. A watch never
// runs under one (what it shared would be held, and stale, as long as it runs): its reads are
// its own.
func TestListReadsTheStatusOnce(t *testing.T) {
	st := &statusReads{reads: map[string]int{}}
	a := New(Options{Reader: scopeReader{st}, Catalog: discovery.NewCatalog(func(ctx context.Context) ([]clusterset.ClusterStatus, error) { return st.read(ctx, "catalog"), nil }),
		Documents: &discovery.Documents{}, Resources: []string{"configmaps"}, Limits: filters.NewLimits(4, 4), RequestTimeout: time.Minute, MaxPageSize: 500,
		Watches: prometheus.NewGauge(prometheus.GaugeOpts{Name: "w"})})
	for _, tc := range []struct {
		path   string
		reads  int // of the status, by the request: the catalog's (if it reads) and the Reader's
		reader int // by the Reader alone; -1: not counted apart
	}{
		{"/api/v1/configmaps?limit=500", 1, -1},                   // the catalog's first read and the list's two
		{"/api/v1/namespaces/ns/configmaps/a", 1, -1},             // the get's two, and the catalog's if it reads again
		{"/api/v1/configmaps?watch=true&timeoutSeconds=1", -1, 2}, // the watch's two, each its own
	} {
		c0, r0 := st.count()
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if rec.Code != http.StatusOK && rec.Code != http.StatusNotFound {
			t.Fatalf("%s: %d: %s", tc.path, rec.Code, rec.Body)
		}
		c1, r1 := st.count()
		if n := c1 - c0 + r1 - r0; tc.reads >= 0 && n != tc.reads {
			t.Errorf("%s: the status was read %d times, want %d", tc.path, n, tc.reads)
		}
		if n := r1 - r0; tc.reader >= 0 && n != tc.reader {
			t.Errorf("%s: the Reader read the status %d times, want %d", tc.path, n, tc.reader)
		}
	}
}
