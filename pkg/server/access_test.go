package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/multicache/multicache/internal/fakeapi"
	"github.com/multicache/multicache/pkg/clusterset"
)

// tokenAccess grants, per bearer token, a set of clusters ("*": all).
type tokenAccess map[string][]string

func (t tokenAccess) Authorize(r *http.Request) (Access, error) {
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if tok == "broken" {
		return nil, errors.New("management cluster unreachable")
	}
	c, ok := t[tok]
	if !ok {
		return nil, ErrUnauthenticated
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
	reg.WaitForSync(t.Context(), 2*time.Second) // a syncs, b cannot
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
