package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/multicache/multicache/internal/fakeapi"
	"github.com/multicache/multicache/pkg/clusterset"
)

func get(t *testing.T, h http.Handler, path, token string) (int, string) {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func waitUntil(t *testing.T, what string, within time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReadinessPolicy: /readyz is open and terse; the details need a token. Readiness waits
// for every cluster to sync every resource; a cluster that keeps failing (Failed or Degraded)
// stops counting after DeadClusterTimeout of failure, a slow one never does.
func TestReadinessPolicy(t *testing.T) {
	good, slow := fakeapi.New(t), fakeapi.New(t)
	slow.SetSlow(true)
	defer slow.SetSlow(false)
	src := clusterset.Static{
		{Name: "good", Config: good.Config(), Fingerprint: "1"},
		{Name: "slow", Config: slow.Config(), Fingerprint: "1"},
		{Name: "dead", Config: &rest.Config{Host: "http://127.0.0.1:1"}, Fingerprint: "1"},
	}
	reg, err := clusterset.New(clusterset.Options{Source: src, Resources: []clusterset.ResourceSpec{{Name: "pods"}},
		ProbeInterval: 100 * time.Millisecond, ProbeTimeout: time.Second, RetryMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const dead = time.Second
	s, err := New(Options{Registry: reg, Tokens: []string{"t"}, DeadClusterTimeout: dead})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	runRegistry(t, reg.Start)
	state := func(cluster string) clusterset.State {
		cs, _ := reg.ClusterStatus(cluster)
		return cs.State
	}
	waitUntil(t, "good synced", 10*time.Second, func() bool { return state("good") == clusterset.Synced })

	code, body := get(t, h, "/readyz", "")
	if code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with a slow cluster: %d %s", code, body)
	}
	for _, secret := range []string{"good", "slow", "dead", "pods"} {
		if strings.Contains(body, secret) {
			t.Errorf("/readyz without a token names %q: %s", secret, body)
		}
	}
	if code, _ := get(t, h, "/readyz?verbose", ""); code != http.StatusUnauthorized {
		t.Errorf("/readyz?verbose without a token: %d, want 401", code)
	}
	if code, body := get(t, h, "/readyz?verbose", "t"); code != http.StatusServiceUnavailable || !strings.Contains(body, "slow/pods") {
		t.Errorf("/readyz?verbose with a token: %d %s", code, body)
	}

	time.Sleep(dead + 500*time.Millisecond)
	if code, body := get(t, h, "/readyz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz %s after start with a cluster still syncing (not failing): %d %s, want 503", dead+500*time.Millisecond, code, body)
	}
	slow.SetSlow(false)
	waitUntil(t, "ready once the slow cluster synced, the dead one no longer counting", 10*time.Second, func() bool {
		code, _ := get(t, h, "/readyz", "")
		return code == http.StatusOK
	})

	good.SetDown(true)
	waitUntil(t, "good degraded", 10*time.Second, func() bool { return state("good") == clusterset.Degraded })
	cs, _ := reg.ClusterStatus("good")
	if len(cs.Resources) != 1 {
		t.Fatalf("good's resources: %+v, want pods alone", cs.Resources)
	}
	degradedSince := cs.Resources[0].Since
	// Judged only while the answer came within dead of the change: a starved CPU may take
	// longer between the two, and then 200 is right.
	if code, body := get(t, h, "/readyz", ""); code != http.StatusServiceUnavailable && time.Since(degradedSince) < dead {
		t.Errorf("/readyz right after a cluster degraded: %d %s, want 503 until it has failed for %s", code, body, dead)
	}
	waitUntil(t, "ready again once the degraded cluster counts as dead", 10*time.Second, func() bool {
		code, _ := get(t, h, "/readyz", "")
		return code == http.StatusOK
	})
	good.SetDown(false)
}

// TestLimits: watches and other requests beyond their caps get 429 with a message naming the
// setting, and a Retry-After; health checks are never limited.
func TestLimits(t *testing.T) {
	good := fakeapi.New(t)
	reg, err := clusterset.New(clusterset.Options{Source: clusterset.Static{{Name: "good", Config: good.Config(), Fingerprint: "1"}},
		Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg, MaxWatches: 2, MaxRequestsInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	runRegistry(t, reg.Start)
	// A watch of a cluster still syncing is 429 (tested in TestPlannedNotStarted): the limits
	// are tested on a cluster that can be served.
	if missing := reg.WaitForSync(context.Background(), 30*time.Second); missing != nil {
		t.Fatal(missing)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	defer hs.CloseClientConnections()
	watch := func() *http.Response {
		resp, err := http.Get(hs.URL + "/multicache/v1/resources/pods?watch=true")
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	open := []*http.Response{watch(), watch()}
	for _, r := range open {
		if r.StatusCode != 200 {
			t.Fatalf("watch within the cap: %d", r.StatusCode)
		}
	}
	third := watch()
	body, _ := io.ReadAll(third.Body)
	third.Body.Close()
	if third.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "maxWatches") || third.Header.Get("Retry-After") == "" {
		t.Errorf("third watch with maxWatches 2: %d %s", third.StatusCode, body)
	}
	open[0].Body.Close()
	waitUntil(t, "a closed watch frees its slot", 5*time.Second, func() bool {
		r := watch()
		defer r.Body.Close()
		if r.StatusCode == 200 {
			open = append(open, r)
			return true
		}
		return false
	})
	for _, r := range open[1:] {
		r.Body.Close()
	}

	release, ok := s.limits.AcquireRequest(httptest.NewRecorder()) // one request in flight
	if !ok {
		t.Fatal("the only request slot is taken")
	}
	for _, path := range []string{"/multicache/v1/resources/pods", "/multicache/v1/clusters", "/multicache/v1/resources/pods/good/ns/x"} {
		code, body := get(t, s.Handler(), path, "")
		if code != http.StatusTooManyRequests || !strings.Contains(body, "maxRequestsInFlight") {
			t.Errorf("%s with every request slot taken: %d %s", path, code, body)
		}
	}
	if code, _ := get(t, s.Handler(), "/healthz", ""); code != 200 {
		t.Errorf("/healthz limited: %d", code)
	}
	release()
	if code, body := get(t, s.Handler(), "/multicache/v1/clusters", ""); code != 200 {
		t.Errorf("after the slot is released: %d %s", code, body)
	}
}
