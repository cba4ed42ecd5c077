package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// fakeAPI is a minimal kube-apiserver stand-in for unit tests of the server's own policies
// (readiness, limits): discovery of core/v1 pods, /version, an empty pod list and a watch that
// stays open. It can be made slow (lists hang) or down (every request fails with 500). The
// integration, chaos and e2e suites use real API servers; this never stands in for them.
type fakeAPI struct {
	srv *httptest.Server

	mu   sync.Mutex
	slow chan struct{} // while open, lists hang
	down bool
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) config() *rest.Config { return &rest.Config{Host: f.srv.URL} }

func (f *fakeAPI) setSlow(slow bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case slow && f.slow == nil:
		f.slow = make(chan struct{})
	case !slow && f.slow != nil:
		close(f.slow)
		f.slow = nil
	}
}

func (f *fakeAPI) setDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	down, slow := f.down, f.slow
	f.mu.Unlock()
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	if down {
		reply(500, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500, "message": "down for the test"})
		return
	}
	q := r.URL.Query()
	switch r.URL.Path {
	case "/version":
		reply(200, map[string]string{"major": "1", "minor": "37", "gitVersion": "v1.37.1"})
	case "/api":
		reply(200, map[string]any{"kind": "APIVersions", "versions": []string{"v1"},
			"serverAddressByClientCIDRs": []any{map[string]string{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}}})
	case "/apis":
		reply(200, map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": []any{}})
	case "/api/v1":
		reply(200, map[string]any{"kind": "APIResourceList", "groupVersion": "v1", "resources": []any{
			map[string]any{"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod", "verbs": []string{"get", "list", "watch"}, "shortNames": []string{"po"}},
		}})
	case "/api/v1/pods":
		switch {
		case q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
			reply(400, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 400, "reason": "BadRequest", "message": "no watch-list here"})
		case q.Get("watch") == "true":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			if slow != nil {
				select {
				case <-slow:
				case <-r.Context().Done():
					return
				}
			}
			reply(200, map[string]any{"kind": "PodList", "apiVersion": "v1", "metadata": map[string]string{"resourceVersion": "1"}, "items": []any{}})
		}
	default:
		reply(404, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound", "message": "not here"})
	}
}

// runRegistry starts reg until the test ends.
func runRegistry(t *testing.T, start func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}
