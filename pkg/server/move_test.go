package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1 "k8s.io/api/core/v1"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/storage/peer"
	"github.com/multicache/multicache/pkg/watchcache"
)

// movingFleet is a Fleet whose owners a test changes while requests run.
type movingFleet struct {
	mu     sync.Mutex
	owners []shard.Owner
	change chan struct{}
}

func newMovingFleet(owners ...shard.Owner) *movingFleet {
	return &movingFleet{owners: owners, change: make(chan struct{})}
}

func (f *movingFleet) Identity() string { return "me" }

func (f *movingFleet) Owners() []shard.Owner {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.owners)
}

func (f *movingFleet) WaitChange() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.change
}

// set replaces the owners and wakes every waiter.
func (f *movingFleet) set(owners ...shard.Owner) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.owners = owners
	close(f.change)
	f.change = make(chan struct{})
}

func self(cluster string) shard.Owner {
	return shard.Owner{Cluster: cluster, Holder: "me", Self: true, Live: true}
}

// openWatch starts a watch without credentials and returns its lines as they come.
func openWatch(t *testing.T, url string) (<-chan string, int) {
	t.Helper()
	return watchFrom(t, url, "")
}

// endsWithGone reads lines until an ERROR event, and checks that it is a 410 saying why, and
// that no DELETED event came before it.
func endsWithGone(t *testing.T, what string, lines <-chan string, why string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("%s: the watch ended with no ERROR event", what)
			}
			var ev struct {
				Type   string `json:"type"`
				Object struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"object"`
			}
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("%s: line %q: %v", what, line, err)
			}
			switch ev.Type {
			case "DELETED":
				t.Errorf("%s: a DELETED event before the plan change ended the watch: %s", what, line)
			case "ERROR":
				if ev.Object.Code != http.StatusGone || !strings.Contains(ev.Object.Message, why) {
					t.Errorf("%s: ERROR %d %q, want 410 saying %q", what, ev.Object.Code, ev.Object.Message, why)
				}
				return
			}
		case <-timeout:
			t.Fatalf("%s: no ERROR event 10s after the plan changed: the watch went silent", what)
		}
	}
}

// TestEveryWatchEndsWhenItsPlanChanges: fleet watches (Kubernetes and native API, local-only
// or fanned in), /clusters/{name} watches and native cluster= watches end with 410 when a
// cluster they span moves, joins, leaves, or comes back from down under the same owner: never
// with deletes, never silently. A watch whose plan did not change goes on.
func TestEveryWatchEndsWhenItsPlanChanges(t *testing.T) {
	watches := map[string]string{
		"fleet":          "/api/v1/pods?watch=true&allowWatchBookmarks=true",
		"fleet native":   "/multicache/v1/resources/pods?watch=true",
		"fleet rv=0":     "/api/v1/pods?watch=true&resourceVersion=0",
		"/clusters/a":    "/clusters/a/api/v1/pods?watch=true",
		"/clusters/b":    "/clusters/b/api/v1/pods?watch=true",
		"native cluster": "/multicache/v1/resources/pods?watch=true&cluster=b",
	}
	fleetWide := []string{"fleet", "fleet native", "fleet rv=0"}
	// While b has no live owner, a watch that starts with the current objects answers 503
	// (TestDownClusterIsNoPartialList), native ones too: that case watches from now.
	fromNow := []string{"fleet from now"}
	watches["fleet from now"] = "/api/v1/pods?watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
	down := shard.Owner{Cluster: "b", Holder: "p2", URL: "http://127.0.0.1:1", Live: false}
	up := down
	up.Live = true
	cases := []struct {
		name       string
		from, then []shard.Owner
		ends       []string
		goesOn     []string
		why        string
	}{
		{"a cluster moves", []shard.Owner{self("a"), self("b")}, []shard.Owner{self("a"), up},
			append(fleetWide, "/clusters/b", "native cluster"), []string{"/clusters/a"}, `cluster "b" moved from replica "me" to "p2"`},
		{"a cluster joins", []shard.Owner{self("a"), self("b")}, []shard.Owner{self("a"), self("b"), self("c")},
			fleetWide, []string{"/clusters/a", "/clusters/b", "native cluster"}, `cluster "c" joined the fleet`},
		{"a cluster leaves", []shard.Owner{self("a"), self("b")}, []shard.Owner{self("a")},
			append(fleetWide, "/clusters/b", "native cluster"), []string{"/clusters/a"}, `cluster "b" left the fleet`},
		{"a down cluster comes back under its owner", []shard.Owner{self("a"), down}, []shard.Owner{self("a"), up},
			fromNow, []string{"/clusters/a"}, `cluster "b" is served again`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fl := newMovingFleet(tc.from...)
			hs, _ := kubeFixtureWith(t, Options{Fleet: fl})
			open := map[string]<-chan string{}
			for _, name := range append(slices.Clone(tc.ends), tc.goesOn...) {
				lines, code := openWatch(t, hs.URL+watches[name])
				if code != 200 {
					t.Fatalf("%s: %d", name, code)
				}
				open[name] = lines
			}
			time.Sleep(200 * time.Millisecond) // let every watch reach its loop; the test holds without it
			fl.set(tc.then...)
			for _, name := range tc.ends {
				endsWithGone(t, name, open[name], tc.why)
			}
			for _, name := range tc.goesOn {
				deadline := time.After(time.Second)
			read:
				for {
					select {
					case line, ok := <-open[name]:
						if !ok || strings.Contains(line, `"ERROR"`) {
							t.Errorf("%s ended though its plan did not change: %s", name, line)
							break read
						}
					case <-deadline:
						break read
					}
				}
			}
		})
	}
}

// TestPlannedNotStarted: a cluster this replica owns but has not started yet (the fence moved
// before the Registry started it) is never left out of an answer: lists, gets and
// initial-events watches that span it answer 429 with Retry-After, and its /clusters/{name}
// path answers 429, not 404, in both APIs. A watch from a position goes on, and will see its
// objects as adds.
func TestPlannedNotStarted(t *testing.T) {
	fl := newMovingFleet(self("a"), self("b"), self("c")) // c is not in the Registry
	hs, _ := kubeFixtureWith(t, Options{Fleet: fl})
	for _, path := range []string{
		"/api/v1/pods",
		"/api/v1/pods?limit=1",
		"/api/v1/namespaces/ns/pods/only-a",
		"/api/v1/pods?watch=true",
		"/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan",
		"/clusters/c/api/v1/pods",
		"/clusters/c/api/v1/namespaces/ns/pods/x",
		"/clusters/c/api/v1/pods?watch=true",
	} {
		code, h, body := do(t, hs, "GET", path, "")
		var st metav1.Status
		if err := json.Unmarshal(body, &st); err != nil || code != http.StatusTooManyRequests || h.Get("Retry-After") == "" ||
			st.Reason != metav1.StatusReasonTooManyRequests || !strings.Contains(st.Message, `c`) {
			t.Errorf("%s: %d Retry-After %q %s; want 429 naming c", path, code, h.Get("Retry-After"), body)
		}
	}
	// The native API the same: a list, a get in c, and a watch that starts with the current
	// objects. (A list without c's objects would read, to a client that relists, as their
	// deletion.)
	for _, path := range []string{"/multicache/v1/resources/pods", "/multicache/v1/resources/pods?limit=1", "/multicache/v1/resources/pods/c/ns/x", "/multicache/v1/resources/pods?watch=true"} {
		code, h, body := do(t, hs, "GET", path, "")
		if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" || !strings.Contains(string(body), "c (not started") {
			t.Errorf("%s: %d Retry-After %q %s; want 429 naming c", path, code, h.Get("Retry-After"), body)
		}
	}
	// The clusters that are started answer as before.
	if code, _, body := do(t, hs, "GET", "/api/v1/pods?labelSelector=multicache.io/cluster+in+(a,b)", ""); code != 200 {
		t.Errorf("a and b alone: %d %s", code, body)
	}
	if code, _, body := do(t, hs, "GET", "/multicache/v1/resources/pods?cluster=a&cluster=b", ""); code != 200 {
		t.Errorf("native, a and b alone: %d %s", code, body)
	}
	// The native cluster list reports c planned here and not started, by name.
	code, _, body := do(t, hs, "GET", "/multicache/v1/clusters", "")
	if code != 200 || !strings.Contains(string(body), "not started") {
		t.Errorf("native clusters: %d %s; want c reported not started", code, body)
	}
	// Once c leaves the plan (it moved on), the same answers are whole again.
	fl.set(self("a"), self("b"))
	if code, _, body := do(t, hs, "GET", "/api/v1/pods", ""); code != 200 {
		t.Errorf("after c left the plan: %d %s", code, body)
	}
}

// ownerOf is a replica that runs cluster (and answers its peers), ready: it holds the
// cluster's whole list. via, when set, wraps its handler.
// Its bookmarks come every 100ms.
func ownerOf(t *testing.T, cluster clusterset.ClusterConfig, via func(http.Handler) http.Handler) *httptest.Server {
	reg, err := clusterset.New(clusterset.Options{Source: clusterset.Static{cluster}, Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg, BookmarkInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runRegistry(t, reg.Start)
	waitUntil(t, "the owner holds "+cluster.Name, 10*time.Second, func() bool {
		return len(s.local.Info(context.Background(), "pods")) == 1 && len(s.local.Unready("pods", nil)) == 0
	})
	h := s.Handler()
	if via != nil {
		h = via(h)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs
}

// TestProxiedWatchEndsWhenItsOwnerChanges: a /clusters/{name} watch this replica relays from
// the cluster's owner ends with a 410 ERROR event once the cluster moves on, whatever the old
// owner's stream does (here: it stays open and says nothing more).
func TestProxiedWatchEndsWhenItsOwnerChanges(t *testing.T) {
	src, _, _ := fakeClustersAB(t)
	owner := ownerOf(t, src[1], nil)
	fl := newMovingFleet(self("a"), shard.Owner{Cluster: "b", Holder: "p2", URL: owner.URL, Live: true})
	hs, _ := kubeFixtureOf(t, src, Options{Fleet: fl})
	lines, code := openWatch(t, hs.URL+"/clusters/b/api/v1/pods?watch=true")
	if code != 200 {
		t.Fatalf("proxied watch: %d", code)
	}
	select {
	case line := <-lines:
		if !strings.Contains(line, `"ADDED"`) || !strings.Contains(line, `"both"`) {
			t.Fatalf("first line %s, want the owner's ADDED of both", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the owner's event was not relayed")
	}
	fl.set(self("a"), shard.Owner{Cluster: "b", Holder: "p3", URL: "http://127.0.0.1:1", Live: true})
	endsWithGone(t, "proxied /clusters/b", lines, `cluster "b" moved from replica "p2" to "p3"`)
}

// TestProxiedWatchAnswersBeforeItsFirstEvent: a relayed /clusters/{name} watch that has no
// event to send yet (an empty namespace) still answers at once: client-go's Watch waits for the
// headers.
func TestProxiedWatchAnswersBeforeItsFirstEvent(t *testing.T) {
	src, _, _ := fakeClustersAB(t)
	owner := ownerOf(t, src[1], nil)
	fl := newMovingFleet(self("a"), shard.Owner{Cluster: "b", Holder: "p2", URL: owner.URL, Live: true})
	hs, _ := kubeFixtureOf(t, src, Options{Fleet: fl})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+"/clusters/b/api/v1/namespaces/empty/pods?watch=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the relayed watch sent no headers: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("relayed watch: %d", resp.StatusCode)
	}
}

// TestPeersAnswerUncompressed: a replica asks its peers for identity encoding, so that a
// fan-out is not gzipped and gunzipped at every hop; the client's own Accept-Encoding stays
// with the replica it asked.
func TestPeersAnswerUncompressed(t *testing.T) {
	asked := make(chan string, 1)
	src, _, _ := fakeClustersAB(t)
	owner := ownerOf(t, src[1], func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case asked <- r.Header.Get("Accept-Encoding"):
			default:
			}
			h.ServeHTTP(w, r)
		})
	})
	fl := newMovingFleet(self("a"), shard.Owner{Cluster: "b", Holder: "p2", URL: owner.URL, Live: true})
	hs, _ := kubeFixtureOf(t, src, Options{Fleet: fl})
	req, _ := http.NewRequest("GET", hs.URL+"/clusters/b/api/v1/pods", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("relayed list: %d", resp.StatusCode)
	}
	select {
	case got := <-asked:
		if got != "identity" {
			t.Errorf("the peer was asked for Accept-Encoding %q, want identity", got)
		}
	default:
		t.Fatalf("the peer was not asked (answer %d)", resp.StatusCode)
	}
}

// TestDownClusterIsNoPartialList: while a cluster has no live owner (its owner died, and the
// others take it within a lease duration), a Kubernetes-API list or initial-events watch that
// spans it answers 503 with Retry-After, never a list without its objects; one that does not
// span it is answered. The native API answers the same.
func TestDownClusterIsNoPartialList(t *testing.T) {
	fl := newMovingFleet(self("a"), shard.Owner{Cluster: "b", Holder: "p2", URL: "http://127.0.0.1:1", Live: false})
	hs, _ := kubeFixtureWith(t, Options{Fleet: fl})
	for _, path := range []string{"/api/v1/pods", "/api/v1/pods?watch=true", "/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"} {
		code, h, body := do(t, hs, "GET", path, "")
		if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(string(body), `b (its owner, replica \"p2\", is down)`) {
			t.Errorf("%s: %d Retry-After %q %s; want 503 naming b", path, code, h.Get("Retry-After"), body)
		}
	}
	if code, _, body := do(t, hs, "GET", "/api/v1/pods?labelSelector=multicache.io/cluster%3Da", ""); code != http.StatusOK {
		t.Errorf("a alone: %d %s", code, body)
	}
	// The native API the same.
	for _, path := range []string{"/multicache/v1/resources/pods", "/multicache/v1/resources/pods?watch=true"} {
		code, h, body := do(t, hs, "GET", path, "")
		if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(string(body), `b (its owner, replica \"p2\", is down)`) {
			t.Errorf("native %s: %d Retry-After %q %s; want 503 naming b", path, code, h.Get("Retry-After"), body)
		}
	}
	if code, _, body := do(t, hs, "GET", "/multicache/v1/resources/pods?cluster=a", ""); code != http.StatusOK {
		t.Errorf("native, a alone: %d %s", code, body)
	}
}

// TestFanInNeverAnswersPartially: in the Kubernetes API, a part's 429 (a planned cluster not
// complete there) or 410 is the whole answer's, and a part that cannot be reached makes the
// answer 503 with Retry-After: never a list without that part's clusters.
func TestFanInNeverAnswersPartially(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int // the owner's answer; 0: it cannot be reached
		want int
	}{
		{"the owner is not complete yet", http.StatusTooManyRequests, http.StatusTooManyRequests},
		{"the owner's position is gone", http.StatusGone, http.StatusGone},
		{"the owner cannot be reached", 0, http.StatusServiceUnavailable},
		{"the owner fails", http.StatusInternalServerError, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(peer.ProtocolHeader, peer.ProtocolVersion) // an owner of this release
				filters.WriteError(w, tc.code, "the owner's own words")
			}))
			url := owner.URL
			if tc.code == 0 {
				owner.Close()
			} else {
				t.Cleanup(owner.Close)
			}
			fl := newMovingFleet(self("a"), shard.Owner{Cluster: "b", Holder: "p2", URL: url, Live: true})
			hs, _ := kubeFixtureWith(t, Options{Fleet: fl})
			code, h, body := do(t, hs, "GET", "/api/v1/pods", "")
			if code != tc.want || (code != http.StatusGone && h.Get("Retry-After") == "") {
				t.Errorf("fleet list: %d Retry-After %q %s; want %d", code, h.Get("Retry-After"), body, tc.want)
			}
		})
	}
}

// notReadyFleet is a Fleet whose replica is not coordinated yet.
type notReadyFleet struct{ *movingFleet }

func (notReadyFleet) Ready() error {
	return errors.New("sharding: not coordinated with the other replicas yet")
}

// TestNotCoordinatedAnswersNothing: a replica that is not coordinated (or self-fenced)
// reports not ready and answers reads with 429, after authentication, never with an empty
// answer.
func TestNotCoordinatedAnswersNothing(t *testing.T) {
	hs, _ := kubeFixtureWith(t, Options{Fleet: notReadyFleet{newMovingFleet(self("a"), self("b"))}, Tokens: []string{"secret"}, PeerTrust: newTestPKI(t).trust("me")})
	ask := func(path, token string) (int, http.Header, string) {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	for _, path := range []string{"/api/v1/pods", "/clusters/a/api/v1/pods", "/multicache/v1/resources/pods"} {
		if code, h, body := ask(path, "secret"); code != http.StatusTooManyRequests || h.Get("Retry-After") == "" || !strings.Contains(body, "not coordinated") {
			t.Errorf("%s: %d %s; want 429 saying why", path, code, body)
		}
		if code, _, _ := ask(path, ""); code != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d, want 401 (authentication comes first)", path, code)
		}
	}
	if code, _, _ := ask("/readyz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz: %d, want 503", code)
	}
}

// gatedCache passes the aggregate's events to the watch cache once open is closed: until then
// the cache holds none of them, while the stacks that feed it are synced.
type gatedCache struct {
	inner *watchcache.Cache
	open  chan struct{}
}

func (g gatedCache) OnAdd(c string, obj any, initial bool) { <-g.open; g.inner.OnAdd(c, obj, initial) }
func (g gatedCache) OnUpdate(c string, o, n any)           { <-g.open; g.inner.OnUpdate(c, o, n) }
func (g gatedCache) OnDelete(c string, obj any)            { <-g.open; g.inner.OnDelete(c, obj) }
func (g gatedCache) OnHandoff(c string)                    { <-g.open; g.inner.OnHandoff(c) }
func (g gatedCache) OnListed(c string)                     { <-g.open; g.inner.OnListed(c) }
func (g gatedCache) OnLeft(c string)                       { <-g.open; g.inner.OnLeft(c) }

// TestWatchListWaitsForTheWatchCache (invariant 4): a cluster whose stack has synced, but
// whose initial list the watch cache has not taken yet, makes initial-events watches and
// planned lists (a list's objects carry the cache's positions) answer 429; once the cache holds it, a watch-list sends every object before
// the bookmark that ends the initial events.
func TestWatchListWaitsForTheWatchCache(t *testing.T) {
	src, _, _ := fakeClustersAB(t)
	reg, err := clusterset.New(clusterset.Options{Source: src, Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg, Fleet: newMovingFleet(self("a"), self("b")), BookmarkInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// The cache is fed through a gate: its own registration is replaced by the gated one.
	s.local.Registration("pods").Remove()
	<-s.local.Registration("pods").Done()
	gate := gatedCache{inner: s.local.Cache("pods"), open: make(chan struct{})}
	agg, _ := reg.Aggregate("pods")
	gated, err := agg.AddEventHandlerWithOptions(gate, aggregate.HandlerOptions{EveryEvent: true})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	t.Cleanup(func() { gated.Remove() })
	runRegistry(t, reg.Start)
	waitUntil(t, "stacks synced", 10*time.Second, func() bool {
		ca, _ := reg.ClusterStatus("a")
		cb, _ := reg.ClusterStatus("b")
		return ca.State == clusterset.Synced && cb.State == clusterset.Synced
	})
	watchList := "/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=2"
	for _, path := range []string{watchList, "/api/v1/pods?watch=true", "/multicache/v1/resources/pods?watch=true", "/api/v1/pods", "/api/v1/pods?limit=1"} {
		code, h, body := do(t, hs, "GET", path, "")
		if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" || !strings.Contains(string(body), "initial list") {
			t.Errorf("%s, the cache without its lists: %d %s; want 429 naming the initial list", path, code, body)
		}
	}
	close(gate.open)
	waitUntil(t, "the cache holds both lists", 10*time.Second, func() bool { return len(s.local.Unready("pods", nil)) == 0 })
	evs := watchLines(t, hs, watchList, "", 4)
	if len(evs) < 4 {
		t.Fatalf("watch-list: %d events %+v, want 3 objects and the end bookmark", len(evs), evs)
	}
	var names []string
	for _, ev := range evs[:3] {
		var p corev1.Pod
		if ev.Type != string(api.Added) || json.Unmarshal(ev.Object, &p) != nil {
			t.Fatalf("event %+v before the end bookmark", ev)
		}
		names = append(names, p.Annotations[api.ClusterAnnotation]+"/"+p.Name)
	}
	var bm metav1.PartialObjectMetadata
	if evs[3].Type != "BOOKMARK" || json.Unmarshal(evs[3].Object, &bm) != nil || bm.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
		t.Errorf("fourth event %+v, want the bookmark that ends the initial events", evs[3])
	}
	if want := []string{"a/both", "a/only-a", "b/both"}; !slices.Equal(names, want) {
		t.Errorf("initial events %v, want %v", names, want)
	}
}

// staticFleet is a Fleet whose owners a test sets.
type staticFleet struct {
	owners []shard.Owner
	change chan struct{}
}

func (f *staticFleet) Identity() string            { return "me" }
func (f *staticFleet) Owners() []shard.Owner       { return f.owners }
func (f *staticFleet) WaitChange() <-chan struct{} { return f.change }
