package server

// Regression tests of the read path's invariants (docs/ARCHITECTURE.md, "Moves"), one per
// defect that once broke them. Each says which invariant it holds.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/multicache/multicache/internal/fakeapi"
	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/client"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/watchcache"
)

// retainingSource is a mutableSource that is also a clusterset.HandoffSource: a cluster it
// stops offering but still retains leaves as a handoff (a move), as the shard Coordinator's do.
type retainingSource struct {
	*mutableSource
	mu     sync.Mutex
	retain map[string]bool
}

func (r *retainingSource) Retains(c string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.retain[c]
}

func (m *mutableSource) drop(name string) {
	m.mu.Lock()
	m.cfgs = slices.DeleteFunc(slices.Clone(m.cfgs), func(c clusterset.ClusterConfig) bool { return c.Name == name })
	m.mu.Unlock()
	m.ch <- struct{}{}
}

// replica is a server over a Registry of src's clusters, synced and held whole by its watch
// cache, with bookmarks every 100ms.
type replica struct {
	hs  *httptest.Server
	s   *Server
	reg *clusterset.Registry
}

func newReplica(t *testing.T, src clusterset.Source, opts Options) *replica {
	t.Helper()
	reg, err := clusterset.New(clusterset.Options{Source: src, Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	opts.Registry = reg
	if opts.BookmarkInterval == 0 {
		opts.BookmarkInterval = 100 * time.Millisecond
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	runRegistry(t, reg.Start)
	if missing := reg.WaitForSync(t.Context(), 20*time.Second); missing != nil {
		t.Fatalf("unsynced: %v", missing)
	}
	waitUntil(t, "the watch cache holds the lists", 10*time.Second, func() bool { return len(s.local.Unready("pods", nil)) == 0 })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return &replica{hs: hs, s: s, reg: reg}
}

// watchFrom opens a watch with token (none when "") and returns its lines.
func watchFrom(t *testing.T, url, token string) (<-chan string, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 4096)
	go func() {
		defer close(lines)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines, resp.StatusCode
}

// waitFor reads lines until one contains what, or within passes; it returns the lines read.
func waitFor(lines <-chan string, what string, within time.Duration) (bool, []string) {
	var got []string
	deadline := time.After(within)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return false, got
			}
			got = append(got, l)
			if strings.Contains(l, what) {
				return true, got
			}
		case <-deadline:
			return false, got
		}
	}
}

// podSource is a mutableSource of one fake cluster per name, each with pod p-{name}.
func podSource(t *testing.T, names ...string) *mutableSource {
	src := &mutableSource{ch: make(chan struct{}, 16)}
	for _, n := range names {
		src.cfgs = append(src.cfgs, podCluster(t, n, "p-"+n))
	}
	return src
}

// podCluster is a fake cluster name with pods. Its API server stops when the test ends, after
// whatever was started later: make it before a Registry that will run it.
func podCluster(t *testing.T, name string, pods ...string) clusterset.ClusterConfig {
	f := fakeapi.New(t)
	var ps []corev1.Pod
	for _, p := range pods {
		ps = append(ps, pod(p))
	}
	f.SetPods(ps)
	return clusterset.ClusterConfig{Name: name, Config: f.Config(), Fingerprint: "1"}
}

func lastLine(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// kubeListMeta is a Kubernetes list's metadata and its pods.
type kubeListMeta struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Items []corev1.Pod `json:"items"`
}

// TestWatchSeesAPlannedClusterStart (invariant 1): the fence says this replica owns a and b,
// its Registry runs only a, and z's owner is down. A watch from now opened before b starts
// relays b's objects once b starts.
func TestWatchSeesAPlannedClusterStart(t *testing.T) {
	src := podSource(t, "a")
	b := podCluster(t, "b", "p-b") // before the replica: its API server outlives the replica's watch
	fl := newMovingFleet(self("a"), self("b"), shard.Owner{Cluster: "z", Holder: "p2", URL: "http://127.0.0.1:1", Live: false})
	r := newReplica(t, src, Options{Fleet: fl})
	lines, code := watchFrom(t, r.hs.URL+"/api/v1/pods?watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", "")
	if code != 200 {
		t.Fatalf("watch: %d", code)
	}
	src.add(b)
	if ok, got := waitFor(lines, "p-b", 10*time.Second); !ok {
		t.Errorf("the watch opened while b was planned but not started never relayed p-b: %d lines, last %q", len(got), lastLine(got))
	}
}

// TestListRightAfterAPlannedClusterSyncs (invariant 1): a list and a watch right after a
// planned cluster synced include it, and the watch relays its later events.
func TestListRightAfterAPlannedClusterSyncs(t *testing.T) {
	src := podSource(t, "a")
	b := podCluster(t, "b", "p-b")
	fl := newMovingFleet(self("a"), self("b"))
	r := newReplica(t, src, Options{Fleet: fl})
	if code, _, body := do(t, r.hs, "GET", "/api/v1/pods", ""); code != http.StatusTooManyRequests {
		t.Errorf("list before b started: %d %s, want 429 (b is planned here)", code, body)
	}
	src.add(b)
	waitUntil(t, "b held by the watch cache", 10*time.Second, func() bool { return len(r.s.local.Unready("pods", []string{"b"})) == 0 })
	code, _, body := do(t, r.hs, "GET", "/api/v1/pods", "")
	var l kubeListMeta
	if err := json.Unmarshal(body, &l); err != nil || code != 200 {
		t.Fatalf("list: %d %s", code, body)
	}
	if !slices.ContainsFunc(l.Items, func(p corev1.Pod) bool { return p.Name == "p-b" }) {
		t.Errorf("list right after b synced lacks p-b: %s", body)
	}
	lines, code := watchFrom(t, r.hs.URL+"/api/v1/pods?watch=true&allowWatchBookmarks=true&resourceVersion="+url.QueryEscape(l.Metadata.ResourceVersion), "")
	if code != 200 {
		t.Fatalf("watch: %d", code)
	}
	if ok, _ := waitFor(lines, "BOOKMARK", 5*time.Second); !ok { // the watch runs
		t.Fatal("no bookmark")
	}
	p := pod("p-b2")
	r.s.local.Cache("pods").OnAdd("b", &p, false)
	if ok, got := waitFor(lines, "p-b2", 3*time.Second); !ok {
		t.Errorf("the watch never relayed b's event: %d lines, last %q", len(got), lastLine(got))
	}
}

// TestMoveIsNoDeleteAnd410 (invariants 2 and 3): a fleet watch served here and a
// /clusters/{name} watch; b moves to p2 (this replica stops it as a handoff, then the fence
// moves): no DELETED, then 410.
func TestMoveIsNoDeleteAnd410(t *testing.T) {
	src := &retainingSource{mutableSource: podSource(t, "a", "b"), retain: map[string]bool{"a": true, "b": true}}
	fl := newMovingFleet(self("a"), self("b"))
	r := newReplica(t, src, Options{Fleet: fl})
	code, _, body := do(t, r.hs, "GET", "/api/v1/pods", "")
	var l kubeListMeta
	if err := json.Unmarshal(body, &l); err != nil || code != 200 {
		t.Fatalf("list: %d %s", code, body)
	}
	type open struct {
		name  string
		lines <-chan string
	}
	var opened []open
	for _, w := range []struct{ name, path string }{
		{"fleet", "/api/v1/pods?watch=true&allowWatchBookmarks=true&resourceVersion=" + url.QueryEscape(l.Metadata.ResourceVersion)},
		{"/clusters/b", "/clusters/b/api/v1/pods?watch=true&allowWatchBookmarks=true&resourceVersion=0"},
	} {
		lines, code := watchFrom(t, r.hs.URL+w.path, "")
		if code != 200 {
			t.Fatalf("%s watch: %d", w.name, code)
		}
		if ok, _ := waitFor(lines, "BOOKMARK", 5*time.Second); !ok {
			t.Fatalf("%s: no bookmark", w.name)
		}
		opened = append(opened, open{w.name, lines})
	}
	src.drop("b") // the coordinator stops b (retained: a handoff) ...
	waitUntil(t, "b stopped", 10*time.Second, func() bool { return !r.reg.Running("b") })
	fl.set(self("a"), shard.Owner{Cluster: "b", Holder: "p2", URL: "http://127.0.0.1:1", Live: true}) // ... then the fence moves
	for _, o := range opened {
		ok, got := waitFor(o.lines, `"ERROR"`, 5*time.Second)
		for _, g := range got {
			if strings.Contains(g, `"DELETED"`) {
				t.Errorf("%s: a move showed as a delete: %.120s", o.name, g)
			}
		}
		if !ok {
			t.Errorf("%s: no 410 after the move: %d lines", o.name, len(got))
		}
	}
}

// TestWatchListRightAfterSync (invariant 4): a watch-list opened as soon as b says Synced
// answers 429 or sends every object before the end bookmark.
func TestWatchListRightAfterSync(t *testing.T) {
	src := podSource(t, "a")
	var many []string
	for i := range 5000 {
		many = append(many, fmt.Sprintf("p-b-%d", i))
	}
	b := podCluster(t, "b", many...)
	r := newReplica(t, src, Options{})
	src.add(b)
	for {
		cs, ok := r.reg.ClusterStatus("b")
		if ok && cs.State == clusterset.Synced {
			break
		}
		time.Sleep(time.Millisecond)
	}
	resp, err := http.Get(r.hs.URL + "/api/v1/pods?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		return // right: the watch cache does not hold b's list yet
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	added := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), `{"type":"ADDED"`) {
			added++
		}
		if strings.HasPrefix(sc.Text(), `{"type":"BOOKMARK"`) {
			break
		}
	}
	if added != 5001 {
		t.Errorf("the watch-list ended its initial events with %d of 5001 objects", added)
	}
}

// TestFleetGetIsNarrowedPerPart (invariant 7): a fleet-wide get by name while this replica
// still runs b, which the plan gives to p2: this replica answers for a only, so "both" is found
// in a (here) and b (at p2): 409 naming 2 clusters, and a Table of 2 rows, not 3.
func TestFleetGetIsNarrowedPerPart(t *testing.T) {
	src, _, _ := fakeClustersAB(t)
	owner := ownerOf(t, src[1], nil)
	fl := newMovingFleet(self("a"), shard.Owner{Cluster: "b", Holder: "p2", URL: owner.URL, Live: true})
	hs, _ := kubeFixtureOf(t, src, Options{Fleet: fl}) // this replica's Registry still runs a and b
	code, _, body := do(t, hs, "GET", "/api/v1/namespaces/ns/pods/both", "")
	if code != http.StatusConflict || !strings.Contains(string(body), "in 2 clusters") {
		t.Errorf("get both: %d %s; want 409 naming 2 clusters", code, body)
	}
	code, _, body = do(t, hs, "GET", "/api/v1/namespaces/ns/pods/both", tableAccept)
	var tbl struct {
		Rows []json.RawMessage `json:"rows"`
	}
	if err := json.Unmarshal(body, &tbl); err != nil || code != 200 || len(tbl.Rows) != 2 {
		t.Errorf("Table get both: %d, %d rows; want 2 rows: %s", code, len(tbl.Rows), body)
	}
}

// TestEmptySelectionWatchIsGuarded (invariant 2): a watch whose selection is empty (a cluster
// selector naming a cluster that is not in the fleet yet) sends bookmarks, and ends with 410
// when that cluster joins, as a watch of a and c does.
func TestEmptySelectionWatchIsGuarded(t *testing.T) {
	fl := newMovingFleet(self("a"), self("b"))
	hs, _ := kubeFixtureWith(t, Options{Fleet: fl})
	lines, code := watchFrom(t, hs.URL+"/api/v1/pods?watch=true&allowWatchBookmarks=true&labelSelector="+url.QueryEscape("multicache.io/cluster=c"), "")
	if code != 200 {
		t.Fatalf("watch: %d", code)
	}
	control, code := watchFrom(t, hs.URL+"/api/v1/pods?watch=true&allowWatchBookmarks=true&labelSelector="+url.QueryEscape("multicache.io/cluster in (a,c)"), "")
	if code != 200 {
		t.Fatalf("control watch: %d", code)
	}
	if ok, _ := waitFor(lines, `"BOOKMARK"`, 2*time.Second); !ok {
		t.Errorf("a watch that selects no cluster sent no BOOKMARK in 2s (bookmark interval 100ms)")
	}
	fl.set(self("a"), self("b"), self("c")) // c joins the fleet
	if ok, _ := waitFor(control, `"ERROR"`, 5*time.Second); !ok {
		t.Errorf("control: the watch of a and c did not end when c joined")
	}
	if ok, got := waitFor(lines, `"ERROR"`, 5*time.Second); !ok {
		t.Errorf("the watch of cluster c (not in the fleet when it started) did not end with 410 when c joined (%d lines)", len(got))
	}
}

// TestFanInWithAnEmptyLocalPartBookmarks (invariant 6): a caller who may read only c (at p2)
// watches the fleet: this replica's part selects none of a and b, and the fan-in still sends
// the bookmarks of the fleet's position.
func TestFanInWithAnEmptyLocalPartBookmarks(t *testing.T) {
	src, _, _ := fakeClustersAB(t)
	pki := newTestPKI(t)
	plain := ownerOf(t, podCluster(t, "c", "p-c"), nil) // auth off: it answers its peer's call
	owner := pki.serve("p2", plain.Config.Handler)
	fl := newMovingFleet(self("a"), self("b"), shard.Owner{Cluster: "c", Holder: "p2", URL: owner.URL, Live: true})
	hs, _ := kubeFixtureOf(t, src, Options{Fleet: fl, Authorizer: tokenAccess{"tc": {"c"}}, PeerTrust: pki.trust("me"), PeerAuthenticator: certVouches})
	lines, code := watchFrom(t, hs.URL+"/api/v1/pods?watch=true&allowWatchBookmarks=true", "tc")
	if code != 200 {
		t.Fatalf("watch: %d", code)
	}
	if ok, got := waitFor(lines, `"BOOKMARK"`, 3*time.Second); !ok {
		t.Errorf("the fan-in sent no BOOKMARK in 3s: %d lines", len(got))
	}
}

// TestAPeerThatRefusesThisReplicaFailsTheList (invariant 1): a part whose replica answers 401
// (it does not trust this replica) makes a fleet list 503, never 200 without its clusters.
func TestAPeerThatRefusesThisReplicaFailsTheList(t *testing.T) {
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`))
	}))
	t.Cleanup(peer.Close)
	fl := newMovingFleet(self("a"), shard.Owner{Cluster: "b", Holder: "p2", URL: peer.URL, Live: true})
	hs, _ := kubeFixtureWith(t, Options{Fleet: fl})
	for _, path := range []string{"/api/v1/pods", "/api/v1/pods?limit=500", "/multicache/v1/resources/pods"} {
		code, h, body := do(t, hs, "GET", path, "")
		if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(string(body), `replica \"p2\" refused`) {
			t.Errorf("%s: %d Retry-After %q %.300s; want 503 naming p2", path, code, h.Get("Retry-After"), body)
		}
	}
}

// TestPeerTimeoutBoundsEveryCall (D8): a peer whose Lease is live but whose API hangs before
// its headers fails fan-out lists, /clusters/{name} reads and the opening of fan-in watches
// within sharding.peerTimeout, with 503.
func TestPeerTimeoutBoundsEveryCall(t *testing.T) {
	release := make(chan struct{})
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(peer.Close)
	t.Cleanup(func() { close(release) }) // before the peer closes
	fl := newMovingFleet(self("a"), shard.Owner{Cluster: "b", Holder: "p2", URL: peer.URL, Live: true})
	hs, _ := kubeFixtureWith(t, Options{Fleet: fl, PeerTimeout: 300 * time.Millisecond})
	for _, path := range []string{
		"/api/v1/pods",
		"/clusters/b/api/v1/pods",
		"/clusters/b/api/v1/namespaces/ns/pods/both",
		"/api/v1/pods?watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan",
		"/multicache/v1/resources/pods?cluster=b",
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+path, nil)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		took := time.Since(start)
		cancel()
		if err != nil {
			t.Errorf("%s: no answer after %s with a peer timeout of 300ms: %v", path, took.Round(time.Millisecond), err)
			continue
		}
		resp.Body.Close()
		t.Logf("%s: %d after %s", path, resp.StatusCode, took.Round(time.Millisecond))
		if resp.StatusCode != http.StatusServiceUnavailable || took > 3*time.Second {
			t.Errorf("%s: %d after %s with a peer timeout of 300ms; want 503", path, resp.StatusCode, took.Round(time.Millisecond))
		}
	}
}

// cachedObjects lists every object agg holds, with its cluster.
func cachedObjects(t *testing.T, agg *aggregate.Aggregate) []aggregate.Item {
	result, err := agg.Select(aggregate.Query{})
	if err != nil {
		t.Fatal(err)
	}
	return result.Items
}

// TestListIsNeverOlderThanItsItems (invariant 6): no item of a list shows a resourceVersion
// newer than the list's, while the watch cache takes events of objects the stores already hold
// (as it does whenever it is behind the stores).
func TestListIsNeverOlderThanItsItems(t *testing.T) {
	hs, s := kubeFixture(t)
	agg, _ := s.opts.Registry.Aggregate("pods")
	h := s.local.Cache("pods")
	objects := cachedObjects(t, agg)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, it := range objects {
				h.OnUpdate(it.Cluster, it.Object, it.Object) // the event of a change the store holds
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	for i := range 300 {
		code, _, body := do(t, hs, "GET", "/api/v1/pods", "")
		var l kubeListMeta
		if err := json.Unmarshal(body, &l); err != nil || code != 200 {
			t.Fatalf("list: %d %s", code, body)
		}
		lp, err := watchcache.ParsePosition(l.Metadata.ResourceVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range l.Items {
			ip, err := watchcache.ParsePosition(p.ResourceVersion)
			if err != nil {
				t.Fatal(err)
			}
			if ip.Seq > lp.Seq {
				t.Fatalf("list %d: item %s has resourceVersion seq %d, newer than its list's %d", i, p.Name, ip.Seq, lp.Seq)
			}
		}
	}
}

// TestClusterSelectorWatchSeesAJoiningCluster (D6, one replica): a watch whose cluster
// selector names a cluster that joins later relays that cluster's objects, as kube-apiserver's
// label-selector watches deliver objects that come to match; a list with the selector has
// them as soon as the cluster is held.
func TestClusterSelectorWatchSeesAJoiningCluster(t *testing.T) {
	src := podSource(t, "a")
	c := podCluster(t, "c", "p-c")
	r := newReplica(t, src, Options{})
	sel := url.QueryEscape("multicache.io/cluster in (a,c)")
	lines, code := watchFrom(t, r.hs.URL+"/api/v1/pods?watch=true&labelSelector="+sel, "")
	if code != 200 {
		t.Fatalf("watch: %d", code)
	}
	if ok, _ := waitFor(lines, "p-a", 5*time.Second); !ok {
		t.Fatal("no initial p-a")
	}
	src.add(c)
	waitUntil(t, "c in the watch cache", 10*time.Second, func() bool {
		return r.reg.Running("c") && len(r.s.local.Unready("pods", []string{"c"})) == 0
	})
	if code, _, body := do(t, r.hs, "GET", "/api/v1/pods?labelSelector="+sel, ""); code != 200 || !strings.Contains(string(body), "p-c") {
		t.Errorf("a list with the selector once c is held: %d %.300s", code, body)
	}
	if ok, got := waitFor(lines, "p-c", 3*time.Second); !ok {
		t.Errorf("the watch of clusters in (a,c) did not relay c's p-c: %d lines", len(got))
	}
}

// TestWatchListAfterAHandoffInTheGap (invariants 3 and 4): a watch that starts with the
// current objects checks that its clusters are complete, then reads the watch cache's position.
// A handoff the watch cache takes in between leaves the cluster out of the snapshot at that
// position: the watch answers 429 (or sends b's objects), never ends its initial events
// without b. Here the handoff reaches the watch cache before the request; the Registry still
// runs b, standing in for the moment between the check and the position read.
func TestWatchListAfterAHandoffInTheGap(t *testing.T) {
	fl := newMovingFleet(self("a"), self("b"))
	hs, s := kubeFixtureWith(t, Options{Fleet: fl})
	s.local.Cache("pods").OnHandoff("b") // what a handoff does after the check passed
	code, h, body := do(t, hs, "GET", "/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1", "")
	if code == http.StatusTooManyRequests {
		if h.Get("Retry-After") == "" || !strings.Contains(string(body), "b (") {
			t.Errorf("429 without Retry-After or without naming b: %s", body)
		}
		return
	}
	var names []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(body)), "\n") {
		var ev rawKubeEvent
		_ = json.Unmarshal([]byte(line), &ev)
		if ev.Type == "BOOKMARK" {
			break
		}
		var p corev1.Pod
		_ = json.Unmarshal(ev.Object, &p)
		names = append(names, p.Annotations[api.ClusterAnnotation]+"/"+p.Name)
	}
	if !slices.Contains(names, "b/both") {
		t.Errorf("the watch-list ended its initial events with %v (%d): b, planned here, is missing", names, code)
	}
}

// TestAbandonedFanInWatchesLeaveNoGoroutines: fan-in watches whose clients leave mid-stream,
// while the peer part floods events, leave no goroutine behind.
func TestAbandonedFanInWatchesLeaveNoGoroutines(t *testing.T) {
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-multicache-peer")
		w.Header().Set(envelopeHeader, envelopeVersion) // an owner of this release
		_, _ = io.WriteString(w, "h {}\n")
		for i := 0; r.Context().Err() == nil; i++ {
			obj := fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"x%d","namespace":"ns","resourceVersion":"r","annotations":{"multicache.io/cluster":"c"}}}`, i)
			if _, err := fmt.Fprintf(w, "ev ADDED %d r c|ns/x%d\n%s\n", len(obj), i, obj); err != nil {
				return
			}
		}
	}))
	t.Cleanup(peer.Close)
	fl := newMovingFleet(self("a"), self("b"), shard.Owner{Cluster: "c", Holder: "p2", URL: peer.URL, Live: true})
	hs, _ := kubeFixtureWith(t, Options{Fleet: fl})
	time.Sleep(500 * time.Millisecond)
	before := runtime.NumGoroutine()
	for range 20 {
		ctx, cancel := context.WithCancel(t.Context())
		req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+"/api/v1/pods?watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		if n, _ := resp.Body.Read(buf); resp.StatusCode != 200 || n == 0 {
			t.Fatalf("fan-in watch: %d, %d bytes", resp.StatusCode, n)
		}
		cancel() // leave without reading the rest
		resp.Body.Close()
	}
	http.DefaultClient.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+5 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+5 {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before 20 abandoned fan-in watches, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// follower records what pkg/client.Follow tells its handler.
type follower struct {
	mu    sync.Mutex
	state map[string]bool
	lost  []string // objects a Replace or a DELETED dropped
	how   []string
}

func (f *follower) Replace(l *api.List) {
	f.mu.Lock()
	defer f.mu.Unlock()
	next := map[string]bool{}
	for _, it := range l.Items {
		var m api.ObjectMeta
		_ = json.Unmarshal(it.Object, &m)
		next[it.Cluster+"/"+m.Metadata.Name] = true
	}
	for k := range f.state {
		if !next[k] {
			f.lost = append(f.lost, k)
			f.how = append(f.how, "Replace without "+k+" (clusters[]: "+fmt.Sprint(l.Clusters)+")")
		}
	}
	f.state = next
}

func (f *follower) Event(ev api.WatchEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var m api.ObjectMeta
	_ = json.Unmarshal(ev.Object, &m)
	k := ev.Cluster + "/" + m.Metadata.Name
	if ev.Type == api.Deleted {
		delete(f.state, k)
		f.lost = append(f.lost, k)
		f.how = append(f.how, "DELETED "+k)
	} else {
		f.state[k] = true
	}
}

// TestNativeFollowSeesNoMoveAsDeletes (invariant 3, native API, D2): pkg/client Follow
// relists when its watch ends with 410 (c moves away, as a handoff). While c is planned here
// and stopped, the native list answers 429, which Follow retries: its handler never loses c's
// objects. Once the fence moves c to a live owner, and the owner holds it, the list is whole.
func TestNativeFollowSeesNoMoveAsDeletes(t *testing.T) {
	cCfg := podCluster(t, "c", "p-c")
	ms := podSource(t, "a")
	ms.cfgs = append(ms.cfgs, cCfg)
	src := &retainingSource{mutableSource: ms, retain: map[string]bool{"a": true, "c": true}}
	fl := newMovingFleet(self("a"), self("c"))
	r := newReplica(t, src, Options{Fleet: fl})
	cl, err := client.New(client.Options{Server: r.hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	f := &follower{state: map[string]bool{}}
	var refusals atomic.Int64
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cl.Follow(ctx, "pods", client.Query{}, f, client.FollowOptions{OnError: func(err error) {
			if client.RetryAfter(err) > 0 {
				refusals.Add(1)
			}
		}})
	}()
	defer func() { cancel(); <-done }()
	waitUntil(t, "Follow holds p-c", 10*time.Second, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.state["c/p-c"] })
	src.drop("c") // c moves: this replica stops it as a handoff; the fence has not moved yet
	waitUntil(t, "Follow's list refused while c is planned here and stopped", 10*time.Second, func() bool { return refusals.Load() > 0 })
	owner := ownerOf(t, cCfg, nil)
	fl.set(self("a"), shard.Owner{Cluster: "c", Holder: "p2", URL: owner.URL, Live: true})
	waitUntil(t, "Follow lists the fleet again", 10*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.state["c/p-c"] && f.state["a/p-a"]
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.lost) > 0 {
		t.Errorf("Follow's handler was told objects are gone (nobody deleted them; c moved): %v", f.how)
	}
}

// TestPagedListAcrossPlanChanges: a paged fleet list (limit 2, key-ordered pages and a label
// selector's plain fan-out) walks every object once while the clusters move between this
// replica and its peer after every page. Both read one Registry that runs every cluster.
func TestPagedListAcrossPlanChanges(t *testing.T) {
	var src clusterset.Static
	for i, name := range []string{"a", "b", "c"} {
		var pods []string
		for j := range 3 + i {
			pods = append(pods, fmt.Sprintf("p%d", j))
		}
		src = append(src, podCluster(t, name, pods...))
	}
	reg, err := clusterset.New(clusterset.Options{Source: src, Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	one, err := New(Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	single := httptest.NewServer(one.Handler())
	t.Cleanup(single.Close)
	peer := func(c string) shard.Owner { return shard.Owner{Cluster: c, Holder: "p2", URL: single.URL, Live: true} }
	plans := [][]shard.Owner{
		{self("a"), self("b"), peer("c")},
		{peer("a"), self("b"), self("c")},
		{self("a"), peer("b"), self("c")},
		{peer("a"), peer("b"), self("c")},
	}
	fl := newMovingFleet(plans[0]...)
	two, err := New(Options{Registry: reg, Fleet: fl})
	if err != nil {
		t.Fatal(err)
	}
	fanned := httptest.NewServer(two.Handler())
	t.Cleanup(fanned.Close)
	runRegistry(t, reg.Start)
	waitUntil(t, "synced", 10*time.Second, func() bool {
		return reg.WaitForSync(t.Context(), 0) == nil && len(one.local.Unready("pods", nil)) == 0 && len(two.local.Unready("pods", nil)) == 0
	})
	for _, selector := range []string{"", "app+notin+(zzz)"} {
		var walked []string
		cont := ""
		for i := range 20 {
			q := "/api/v1/pods?limit=2"
			if selector != "" {
				q += "&labelSelector=" + selector
			}
			if cont != "" {
				q += "&continue=" + url.QueryEscape(cont)
			}
			code, _, body := do(t, fanned, "GET", q, "")
			if code != 200 {
				t.Fatalf("page %d: %d %s", i, code, body)
			}
			keys, _, md := listed(t, body, false)
			walked = append(walked, keys...)
			fl.set(plans[(i+1)%len(plans)]...)
			if cont, _ = md["continue"].(string); cont == "" {
				break
			}
		}
		if len(walked) != 12 || len(slices.Compact(slices.Clone(walked))) != 12 {
			t.Errorf("selector %q: walked %d keys across plan changes, want 12 distinct: %v", selector, len(walked), walked)
		}
	}
}

// slowWriter sends what it is given in chunks of n bytes, each after pause, flushed.
type slowWriter struct {
	http.ResponseWriter
	n     int
	pause time.Duration
}

func (w slowWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		k := min(w.n, len(b))
		time.Sleep(w.pause)
		m, err := w.ResponseWriter.Write(b[:k])
		written += m
		if err != nil {
			return written, err
		}
		w.ResponseWriter.(http.Flusher).Flush()
		b = b[k:]
	}
	return written, nil
}

func (w slowWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// TestUnpagedFanOutListOutlastsThePeerTimeout (D9): a peer that streams its share of an
// unpaged list for longer than sharding.peerTimeout, never pausing that long, is read whole:
// the timeout bounds each read, not the answer.
func TestUnpagedFanOutListOutlastsThePeerTimeout(t *testing.T) {
	var pods []string
	for i := range 20 {
		pods = append(pods, fmt.Sprintf("slow-%02d", i))
	}
	cfg := podCluster(t, "b", pods...)
	owner := ownerOf(t, cfg, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(slowWriter{ResponseWriter: w, n: 512, pause: 100 * time.Millisecond}, r)
		})
	})
	src, _, _ := fakeClustersAB(t)
	src[1] = cfg
	fl := newMovingFleet(self("a"), shard.Owner{Cluster: "b", Holder: "p2", URL: owner.URL, Live: true})
	// Pauses of 100ms against a timeout of a second: room for a starved CPU.
	timeout := time.Second
	hs, _ := kubeFixtureOf(t, src, Options{Fleet: fl, PeerTimeout: timeout})
	start := time.Now()
	code, _, body := do(t, hs, "GET", "/api/v1/pods", "")
	took := time.Since(start)
	var l kubeListMeta
	if err := json.Unmarshal(body, &l); err != nil || code != 200 || len(l.Items) != 22 {
		t.Fatalf("unpaged fleet list while the peer streams its share: %d, %d items %.300s", code, len(l.Items), body)
	}
	if took < timeout {
		t.Errorf("the share came in %s: it did not outlast the peer timeout, the test shows nothing", took)
	}
}

// TestFanOutItemResourceVersionResumes (D10): in a sharded fleet view an object's
// resourceVersion is the fleet's position (its list's), which a fleet watch resumes from.
func TestFanOutItemResourceVersionResumes(t *testing.T) {
	_, fanned := twoReplicas(t)
	code, _, body := do(t, fanned, "GET", "/api/v1/pods", "")
	var l kubeListMeta
	if err := json.Unmarshal(body, &l); err != nil || code != 200 || len(l.Items) == 0 {
		t.Fatalf("list: %d %s", code, body)
	}
	rv := l.Items[len(l.Items)-1].ResourceVersion
	lines, code := watchFrom(t, fanned.URL+"/api/v1/pods?watch=true&allowWatchBookmarks=true&resourceVersion="+url.QueryEscape(rv), "")
	if code != 200 {
		t.Fatalf("watch from an item's resourceVersion: %d", code)
	}
	ok, got := waitFor(lines, `"BOOKMARK"`, 5*time.Second)
	if !ok || slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, `"ERROR"`) }) {
		t.Errorf("a watch from an item's resourceVersion (%s): %v", rv, got)
	}
}

// TestOneOwnerAnswersWithItsOwnPositions: a read that one other replica answers whole (here
// /clusters/b, b at p2) is that replica's answer, positions and all: the objects of a
// watch-list through this replica equal, resourceVersions included, those of an exact list at
// its end bookmark, which is what client-go's watch-list inconsistency detector checks.
func TestOneOwnerAnswersWithItsOwnPositions(t *testing.T) {
	src, _, _ := fakeClustersAB(t)
	owner := ownerOf(t, src[1], nil)
	fl := newMovingFleet(self("a"), shard.Owner{Cluster: "b", Holder: "p2", URL: owner.URL, Live: true})
	hs, _ := kubeFixtureOf(t, src, Options{Fleet: fl})
	evs := watchLines(t, hs, "/clusters/b/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan", "", 2)
	watched := map[string]string{}
	var end string
	for _, ev := range evs {
		var p corev1.Pod
		if err := json.Unmarshal(ev.Object, &p); err != nil {
			t.Fatal(err)
		}
		if ev.Type == "BOOKMARK" {
			end = p.ResourceVersion
			break
		}
		watched[p.Name] = p.ResourceVersion
	}
	if end == "" || len(watched) != 1 {
		t.Fatalf("watch-list of b: %d objects, end %q: %+v", len(watched), end, evs)
	}
	code, _, body := do(t, hs, "GET", "/clusters/b/api/v1/pods?resourceVersionMatch=Exact&resourceVersion="+url.QueryEscape(end), "")
	var l kubeListMeta
	if err := json.Unmarshal(body, &l); err != nil || code != 200 {
		t.Fatalf("exact list at %s: %d %s", end, code, body)
	}
	listed := map[string]string{}
	for _, p := range l.Items {
		listed[p.Name] = p.ResourceVersion
	}
	if fmt.Sprint(listed) != fmt.Sprint(watched) || l.Metadata.ResourceVersion != end {
		t.Errorf("exact list at the end bookmark %s: %v at %s; the watch-list had %v", end, listed, l.Metadata.ResourceVersion, watched)
	}
	// And a watch from an object's resourceVersion goes on.
	lines, code := watchFrom(t, hs.URL+"/clusters/b/api/v1/pods?watch=true&allowWatchBookmarks=true&resourceVersion="+url.QueryEscape(watched["both"]), "")
	if ok, got := waitFor(lines, "BOOKMARK", 5*time.Second); code != 200 || !ok || strings.Contains(strings.Join(got, ""), `"ERROR"`) {
		t.Errorf("watch from the object's resourceVersion: %d %v", code, got)
	}
}
