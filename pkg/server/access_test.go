package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/multicache/multicache/internal/fakeapi"
	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
)

// tokenAccess grants, per bearer token, a set of clusters ("*": all).
type tokenAccess map[string][]string

func (t tokenAccess) Authorize(r *http.Request) (auth.Access, error) {
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if tok == "broken" {
		return nil, errors.New("management cluster unreachable")
	}
	c, ok := t[tok]
	if !ok {
		return nil, auth.ErrUnauthenticated
	}
	return clusterList(c), nil
}

type clusterList []string

func (c clusterList) All(context.Context) (bool, error) { return slices.Contains(c, "*"), nil }
func (c clusterList) Cluster(_ context.Context, name string, _ bool) (bool, error) {
	return slices.Contains(c, "*") || slices.Contains(c, name), nil
}

// TestAccessScopes: /readyz?verbose and /metrics show only the clusters the caller may read;
// a named cluster out of reach is 403; authentication failures are 401, and an authorizer
// that cannot decide is 503.
func TestAccessScopes(t *testing.T) {
	a, b := fakeapi.New(t), fakeapi.New(t)
	a.SetPods([]corev1.Pod{pod("p-0")})
	b.SetSlow(true) // b never syncs: /readyz waits for it
	t.Cleanup(func() { b.SetSlow(false) })
	reg, err := clusterset.New(clusterset.Options{Source: clusterset.Static{{Name: "a", Config: a.Config(), Fingerprint: "1"}, {Name: "b", Config: b.Config(), Fingerprint: "1"}},
		Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg, Authorizer: tokenAccess{"ta": {"a"}, "tb": {"b"}, "all": {"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	runRegistry(t, reg.Start)
	waitUntil(t, "a synced, b listing", 20*time.Second, func() bool { // a syncs, b cannot
		aSynced, bListing := false, false
		for _, cs := range reg.Status() {
			switch {
			case cs.Name == "a":
				aSynced = cs.State == clusterset.Synced
			case cs.Name == "b" && len(cs.Resources) == 1:
				bListing = cs.Resources[0].Progress.Listing
			}
		}
		return aSynced && bListing
	})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	get := func(token, path string) (int, string) {
		req, _ := http.NewRequest("GET", hs.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("ta", "/readyz?verbose"); code != 503 || strings.Contains(body, "b/pods") || !strings.Contains(body, "and 1 cluster resources you may not read") {
		t.Errorf("readyz?verbose as a reader of a: %d %q", code, body)
	}
	if code, body := get("tb", "/readyz?verbose"); code != 503 || !strings.Contains(body, "b/pods") {
		t.Errorf("readyz?verbose as a reader of b: %d %q", code, body)
	}
	if code, body := get("", "/readyz"); code != 503 || strings.Contains(body, "b/pods") {
		t.Errorf("terse readyz: %d %q", code, body)
	}
	code, body := get("ta", "/metrics")
	if code != 200 || !strings.Contains(body, `cluster="a"`) || strings.Contains(body, `cluster="b"`) {
		t.Errorf("metrics as a reader of a: %d; has a: %v, has b: %v", code, strings.Contains(body, `cluster="a"`), strings.Contains(body, `cluster="b"`))
	}
	if _, body := get("all", "/metrics"); !strings.Contains(body, `cluster="b"`) {
		t.Error("metrics as a reader of every cluster lack b")
	}
	// a's list brought its one Pod; b's is under way.
	for _, want := range []string{`multicache_list_objects_loaded{cluster="a",resource="pods"} 1`, `multicache_list_objects_expected{cluster="a",resource="pods"} 1`,
		`multicache_list_in_progress{cluster="a",resource="pods"} 0`, `multicache_list_in_progress{cluster="b",resource="pods"} 1`} {
		if !strings.Contains(body, want) && !strings.Contains(func() string { _, b := get("all", "/metrics"); return b }(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for path, want := range map[string]int{
		"/multicache/v1/resources/pods?cluster=b":          403,
		"/multicache/v1/resources/pods?cluster=a":          200,
		"/multicache/v1/resources/pods/b/default/p-0":      403,
		"/clusters/b/api/v1/pods":                          403,
		"/api/v1/pods?labelSelector=multicache.io/cluster": 200,
		"/apis/multicache.io/v1/clusters/b":                403,
	} {
		if code, body := get("ta", path); code != want {
			t.Errorf("%s as a reader of a: %d %s, want %d", path, code, body, want)
		}
	}
	if code, _ := get("nobody", "/multicache/v1/clusters"); code != 401 {
		t.Errorf("unknown token: %d, want 401", code)
	}
	if code, body := get("broken", "/multicache/v1/clusters"); code != 503 || !strings.Contains(body, "management cluster unreachable") {
		t.Errorf("authorizer error: %d %s, want 503 naming it", code, body)
	}
}

// mutableSource is a Source whose clusters the test changes.
type mutableSource struct {
	mu   sync.Mutex
	cfgs clusterset.Static
	ch   chan struct{}
}

func (m *mutableSource) Load() ([]clusterset.ClusterConfig, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]clusterset.ClusterConfig(nil), m.cfgs...), nil
}

func (m *mutableSource) Changes(context.Context) <-chan struct{} { return m.ch }

func (m *mutableSource) add(c clusterset.ClusterConfig) {
	m.mu.Lock()
	m.cfgs = append(m.cfgs, c)
	m.mu.Unlock()
	m.ch <- struct{}{}
}

// TestAccessJoinLater: a watch of a caller who may read some clusters never streams a cluster
// that joins later, even when the caller could read every cluster there was when it began;
// a caller who may read every cluster sees it.
func TestAccessJoinLater(t *testing.T) {
	a, b := fakeapi.New(t), fakeapi.New(t)
	a.SetPods([]corev1.Pod{pod("p-a")})
	b.SetPods([]corev1.Pod{pod("p-b")})
	src := &mutableSource{cfgs: clusterset.Static{{Name: "a", Config: a.Config(), Fingerprint: "1"}}, ch: make(chan struct{}, 1)}
	reg, err := clusterset.New(clusterset.Options{Source: src, Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg, Authorizer: tokenAccess{"ta": {"a"}, "all": {"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	runRegistry(t, reg.Start)
	if missing := reg.WaitForSync(t.Context(), 20*time.Second); missing != nil {
		t.Fatalf("unsynced: %v", missing)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	watch := func(token, path string) <-chan string {
		req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("watch %s as %s: %v %v", path, token, err, resp)
		}
		lines := make(chan string, 100)
		go func() {
			defer resp.Body.Close()
			defer close(lines)
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		return lines
	}
	watches := map[string]<-chan string{
		"ta kube":   watch("ta", "/api/v1/pods?watch=true"),
		"ta native": watch("ta", "/multicache/v1/resources/pods?watch=true"),
		"all kube":  watch("all", "/api/v1/pods?watch=true"),
	}
	src.add(clusterset.ClusterConfig{Name: "b", Config: b.Config(), Fingerprint: "1"})
	// The Registry loads the source on its own goroutine: wait for b itself, not for a
	// status that may not name it yet.
	waitUntil(t, "cluster b synced", 20*time.Second, func() bool {
		for _, cs := range reg.Status() {
			if cs.Name == "b" {
				return cs.State == clusterset.Synced
			}
		}
		return false
	})
	if ok, got := waitFor(watches["all kube"], "p-b", 10*time.Second); !ok {
		t.Fatalf("a reader of every cluster was not streamed the pod of the cluster that joined: %d lines, last %q", len(got), lastLine(got))
	}
	// A pod of cluster a, after b's: a watch that relays it has passed b's pod, or left it out.
	marker := pod("p-a-after-b")
	s.local.Cache("pods").OnAdd("a", &marker, false)
	for _, name := range []string{"ta kube", "ta native"} {
		ok, got := waitFor(watches[name], "p-a-after-b", 10*time.Second)
		if !ok {
			t.Fatalf("%s: cluster a's later pod never came: %d lines, last %q", name, len(got), lastLine(got))
		}
		for _, l := range got {
			if strings.Contains(l, `"p-b"`) {
				t.Errorf("%s: a reader of cluster a only was streamed cluster b's pod: %s", name, l)
			}
		}
	}
}

// TestProfiling: /debug/pprof/ is served only when asked for, and behind authentication.
func TestProfiling(t *testing.T) {
	reg, err := clusterset.New(clusterset.Options{Source: clusterset.Static{}, Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, on := range []bool{false, true} {
		s, err := New(Options{Registry: reg, Authorizer: tokenAccess{"all": {"*"}}, Profiling: on})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(s.Handler())
		for token, want := range map[string]int{"": 401, "all": 200} {
			req, _ := http.NewRequest("GET", hs.URL+"/debug/pprof/goroutine?debug=1", nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case on && resp.StatusCode != want:
				t.Errorf("profiling on, token %q: %d, want %d", token, resp.StatusCode, want)
			case on && want == 200 && !strings.Contains(string(body), "goroutine profile"):
				t.Errorf("profiling on: not a goroutine profile: %.200s", body)
			case !on && strings.Contains(string(body), "goroutine profile"):
				t.Errorf("profiling off, token %q: a profile was served", token)
			}
		}
		hs.Close()
	}
}

// TestReadyWaitsForTheSource: before the registry has loaded its source, no cluster is known,
// and /readyz must not take that for an empty fleet.
func TestReadyWaitsForTheSource(t *testing.T) {
	reg, err := clusterset.New(clusterset.Options{Source: clusterset.Static{}, Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	code := func() int {
		resp, err := http.Get(hs.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := code(); c != http.StatusServiceUnavailable {
		t.Fatalf("readyz before the source was loaded: %d, want 503", c)
	}
	runRegistry(t, reg.Start)
	deadline := time.Now().Add(5 * time.Second)
	for code() != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("readyz not 200 once an empty source was loaded")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
