package server

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/multicache/multicache/internal/fakeapi"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/watchcache"
)

func pod(name string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: "7", Labels: map[string]string{"app": name}}}
}

// fakeClustersAB is two fake clusters: a has pods both and only-a, b has both.
func fakeClustersAB(t *testing.T) (src clusterset.Static, a, b *fakeapi.Server) {
	a, b = fakeapi.New(t), fakeapi.New(t)
	a.SetPods([]corev1.Pod{pod("both"), pod("only-a")})
	b.SetPods([]corev1.Pod{pod("both")})
	return clusterset.Static{{Name: "a", Config: a.Config(), Fingerprint: "1"}, {Name: "b", Config: b.Config(), Fingerprint: "1"}}, a, b
}

// kubeFixture is a server over two fake clusters: a has pods both and only-a, b has both.
func kubeFixture(t *testing.T, tokens ...string) (*httptest.Server, *Server) {
	return kubeFixtureWith(t, Options{Tokens: tokens})
}

// kubeFixtureWith is kubeFixture with opts (their Registry and BookmarkInterval are set).
func kubeFixtureWith(t *testing.T, opts Options) (*httptest.Server, *Server) {
	src, _, _ := fakeClustersAB(t)
	return kubeFixtureOf(t, src, opts)
}

// startedServer is a server with default options over src, caching pods, its Registry
// running until the test ends.
func startedServer(t *testing.T, src clusterset.Static) *Server {
	reg, err := clusterset.New(clusterset.Options{Source: src, Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	runRegistry(t, reg.Start)
	return s
}

// kubeFixtureOf is kubeFixtureWith over src, the clusters a and b.
func kubeFixtureOf(t *testing.T, src clusterset.Static, opts Options) (*httptest.Server, *Server) {
	reg, err := clusterset.New(clusterset.Options{Source: src, Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	opts.Registry, opts.BookmarkInterval = reg, 100*time.Millisecond
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	runRegistry(t, reg.Start)
	waitUntil(t, "synced", 10*time.Second, func() bool {
		ca, _ := reg.ClusterStatus("a")
		cb, _ := reg.ClusterStatus("b")
		// The watch cache too: until it holds both initial lists, initial watches answer 429.
		return ca.State == clusterset.Synced && cb.State == clusterset.Synced && len(s.local.Unready("pods", nil)) == 0
	})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs, s
}

func do(t *testing.T, hs *httptest.Server, method, path, accept string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader("{}"))
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// TestKubeReads: lists carry the kind, the position, and per object the cluster and a
// resumable resourceVersion; the cluster selector selects clusters; a name in two clusters is
// two rows of a Table or a 409; errors are Status objects with kubectl's reasons.
func TestKubeReads(t *testing.T) {
	hs, s := kubeFixture(t)
	var list struct {
		Kind     string          `json:"kind"`
		Metadata metav1.ListMeta `json:"metadata"`
		Items    []corev1.Pod    `json:"items"`
	}
	code, _, body := do(t, hs, "GET", "/api/v1/pods", "application/vnd.kubernetes.protobuf,application/json")
	if err := json.Unmarshal(body, &list); err != nil || code != 200 || list.Kind != "PodList" || len(list.Items) != 3 {
		t.Fatalf("list: %d %s", code, body)
	}
	if _, err := watchcache.ParsePosition(list.Metadata.ResourceVersion); err != nil {
		t.Errorf("list resourceVersion %q: %v", list.Metadata.ResourceVersion, err)
	}
	for _, p := range list.Items {
		if p.Annotations[api.ClusterAnnotation] == "" || p.Annotations[api.ResourceVersionAnnotation] != "7" || p.Kind != "" {
			t.Errorf("item %s: annotations %v, kind %q", p.Name, p.Annotations, p.Kind)
		}
		if _, err := watchcache.ParsePosition(p.ResourceVersion); err != nil {
			t.Errorf("item %s: resourceVersion %q is not a position", p.Name, p.ResourceVersion)
		}
	}
	for sel, want := range map[string]int{"multicache.io/cluster=b": 1, "multicache.io/cluster!=b": 2, "multicache.io/cluster in (a,b),app=both": 2, "multicache.io/cluster=zz": 0, "!multicache.io/cluster": 0} {
		_, _, body := do(t, hs, "GET", "/api/v1/pods?labelSelector="+url.QueryEscape(sel), "")
		list.Items = nil
		if err := json.Unmarshal(body, &list); err != nil || len(list.Items) != want {
			t.Errorf("labelSelector %q: %d items, want %d (%s)", sel, len(list.Items), want, body)
		}
	}
	code, _, body = do(t, hs, "GET", "/api/v1/namespaces/ns/pods/both", "")
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil || code != 409 || st.Reason != metav1.StatusReasonConflict || !strings.Contains(st.Message, "/clusters/b/api/v1/namespaces/ns/pods/both") {
		t.Errorf("get a name in two clusters: %d %s", code, body)
	}
	var tab metav1.Table
	_, _, body = do(t, hs, "GET", "/api/v1/namespaces/ns/pods/both", tableAccept)
	if err := json.Unmarshal(body, &tab); err != nil || len(tab.Rows) != 2 || tab.ColumnDefinitions[0].Name != "Cluster" || tab.Rows[1].Cells[0] != "b" {
		t.Errorf("get a name in two clusters, as a Table: %s", body)
	}
	var one corev1.Pod
	code, _, body = do(t, hs, "GET", "/clusters/b/api/v1/namespaces/ns/pods/both", "")
	if err := json.Unmarshal(body, &one); err != nil || code != 200 || one.Kind != "Pod" || one.Annotations[api.ClusterAnnotation] != "b" {
		t.Errorf("get in one cluster's view: %d %s", code, body)
	}
	for _, tc := range []struct {
		method, path, accept string
		code                 int
		reason               metav1.StatusReason
	}{
		{"POST", "/api/v1/namespaces/ns/pods", "", 405, metav1.StatusReasonMethodNotAllowed},
		{"DELETE", "/api/v1/namespaces/ns/pods/both", "", 405, metav1.StatusReasonMethodNotAllowed},
		{"PATCH", "/api/v1/configmaps", "", 405, metav1.StatusReasonMethodNotAllowed},
		{"GET", "/api/v1/configmaps", "", 404, metav1.StatusReasonNotFound},
		{"GET", "/api/v1/namespaces/ns/pods/nope", "", 404, metav1.StatusReasonNotFound},
		{"GET", "/api/v1/namespaces/ns/pods/both/log", "", 404, metav1.StatusReasonNotFound},
		{"GET", "/clusters/zz/api/v1/pods", "", 404, metav1.StatusReasonNotFound},
		{"GET", "/api/v1/pods?labelSelector=a+in+(", "", 400, metav1.StatusReasonBadRequest},
		{"GET", "/api/v1/pods?fieldSelector=spec.restartPolicy%3DNever", "", 400, metav1.StatusReasonBadRequest},
		{"GET", "/api/v1/pods?resourceVersion=5&resourceVersionMatch=Exact", "", 400, metav1.StatusReasonBadRequest},
		{"GET", "/api/v1/pods?resourceVersion=" + watchcache.Position{Epoch: "gone", Seq: 1}.String() + "&resourceVersionMatch=Exact", "", 410, metav1.StatusReasonExpired},
		{"GET", "/api/v1/pods", "application/vnd.kubernetes.protobuf", 406, metav1.StatusReasonNotAcceptable},
		{"GET", "/api/v1/pods?watch=true&sendInitialEvents=true", "", 400, metav1.StatusReasonBadRequest},
	} {
		code, _, body := do(t, hs, tc.method, tc.path, tc.accept)
		var st metav1.Status
		if err := json.Unmarshal(body, &st); err != nil || code != tc.code || st.Reason != tc.reason || st.Kind != "Status" || st.APIVersion != "v1" || int(st.Code) != code {
			t.Errorf("%s %s: %d %s, want %d %s", tc.method, tc.path, code, body, tc.code, tc.reason)
		}
	}

	// An exact list at a position reads the state then, whatever came after.
	at := s.local.Cache("pods").Position()
	late := pod("late")
	s.local.Cache("pods").OnAdd("a", &late, false)
	_, _, body = do(t, hs, "GET", "/api/v1/pods?resourceVersionMatch=Exact&resourceVersion="+at.String(), "")
	list.Items = nil
	if err := json.Unmarshal(body, &list); err != nil || len(list.Items) != 3 || list.Metadata.ResourceVersion != at.String() {
		t.Errorf("exact list at %v: %s", at, body)
	}
	_, _, body = do(t, hs, "GET", "/api/v1/pods?resourceVersionMatch=Exact&resourceVersion="+s.local.Cache("pods").Position().String(), "")
	list.Items = nil
	if err := json.Unmarshal(body, &list); err != nil || len(list.Items) != 4 {
		t.Errorf("exact list now: %d items, want 4", len(list.Items))
	}
}

type kubeEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

func watchLines(t *testing.T, hs *httptest.Server, path, accept string, n int) []kubeEvent {
	t.Helper()
	req, _ := http.NewRequest("GET", hs.URL+path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("watch %s: %d %s", path, resp.StatusCode, b)
	}
	var out []kubeEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for len(out) < n && sc.Scan() {
		var ev kubeEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("watch %s: line %q: %v", path, sc.Text(), err)
		}
		out = append(out, ev)
	}
	return out
}

// TestKubeWatch: a watch-list streams the objects, then the BOOKMARK that ends the initial
// events; a position of another run is an ERROR 410 event; a Table watch carries the columns
// in its first event only; timeoutSeconds ends the watch.
func TestKubeWatch(t *testing.T) {
	hs, s := kubeFixture(t)
	evs := watchLines(t, hs, "/api/v1/pods?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", "", 4)
	for i, ev := range evs[:3] {
		var p corev1.Pod
		if ev.Type != "ADDED" || json.Unmarshal(ev.Object, &p) != nil || p.Kind != "Pod" {
			t.Errorf("event %d: %s %s", i, ev.Type, ev.Object)
		}
	}
	var bm metav1.PartialObjectMetadata
	if evs[3].Type != "BOOKMARK" || json.Unmarshal(evs[3].Object, &bm) != nil || bm.Annotations[metav1.InitialEventsAnnotationKey] != "true" || bm.Kind != "Pod" || bm.ResourceVersion != s.local.Cache("pods").Position().String() {
		t.Errorf("after the initial events: %s %s", evs[3].Type, evs[3].Object)
	}
	evs = watchLines(t, hs, "/api/v1/pods?watch=true&resourceVersion="+watchcache.Position{Epoch: "gone", Seq: 3}.String(), "", 1)
	var st metav1.Status
	if evs[0].Type != "ERROR" || json.Unmarshal(evs[0].Object, &st) != nil || st.Code != 410 || st.Reason != metav1.StatusReasonExpired {
		t.Errorf("watch from another run's position: %s %s", evs[0].Type, evs[0].Object)
	}
	evs = watchLines(t, hs, "/api/v1/pods?watch=true&labelSelector=multicache.io%2Fcluster%3Da", tableAccept, 2)
	var first, second metav1.Table
	if json.Unmarshal(evs[0].Object, &first) != nil || json.Unmarshal(evs[1].Object, &second) != nil || len(first.ColumnDefinitions) == 0 || second.ColumnDefinitions != nil || first.Rows[0].Cells[0] != "a" {
		t.Errorf("table watch: %s / %s", evs[0].Object, evs[1].Object)
	}
	start := time.Now()
	watchLines(t, hs, "/api/v1/pods?watch=true&timeoutSeconds=1&resourceVersion="+s.local.Cache("pods").Position().String(), "", 100)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timeoutSeconds=1: the watch lasted %s", d)
	}
}

// TestKubeDiscoveryAndAuth: discovery lists what the clusters serve, with the clusters
// resource; with tokens, the Kubernetes API needs one like the native API does.
func TestKubeDiscoveryAndAuth(t *testing.T) {
	hs, _ := kubeFixture(t, "secret")
	if code, _, body := do(t, hs, "GET", "/api/v1/pods", ""); code != 401 || !strings.Contains(string(body), `"reason":"Unauthorized"`) {
		t.Errorf("no token: %d %s", code, body)
	}
	get := func(path string, out any) {
		req, _ := http.NewRequest("GET", hs.URL+path, nil)
		req.Header.Set("Authorization", "Bearer secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", path, resp.StatusCode, err)
		}
	}
	var core metav1.APIResourceList
	get("/api/v1", &core)
	if len(core.APIResources) != 1 || core.APIResources[0].Name != "pods" || core.APIResources[0].ShortNames[0] != "po" || strings.Join(core.APIResources[0].Verbs, ",") != "get,list,watch" {
		t.Errorf("/api/v1: %+v", core)
	}
	var groups metav1.APIGroupList
	get("/apis", &groups)
	if len(groups.Groups) != 2 || groups.Groups[0].Name != "apiextensions.k8s.io" || groups.Groups[1].Name != "multicache.io" {
		t.Errorf("/apis: %+v", groups)
	}
	var clusters metav1.APIResourceList
	get("/apis/multicache.io/v1", &clusters)
	if len(clusters.APIResources) != 1 || clusters.APIResources[0].Kind != "Cluster" {
		t.Errorf("/apis/multicache.io/v1: %+v", clusters)
	}
	var tab metav1.Table
	req, _ := http.NewRequest("GET", hs.URL+"/apis/multicache.io/v1/clusters", nil)
	req.Header.Set("Authorization", "Bearer secret")
	req.Header.Set("Accept", tableAccept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&tab); err != nil || len(tab.Rows) != 2 || tab.Rows[0].Cells[1] != "Synced" {
		t.Errorf("clusters as a Table: %+v %v", tab, err)
	}
}

// TestKubeMaxPageSize: a Kubernetes API list with a limit answers at most KubeMaxPageSize
// items, and its continue leads to the rest, as a client-go pager reads; without a limit it
// answers everything, as an API server does for clients that do not page.
func TestKubeMaxPageSize(t *testing.T) {
	hs, _ := kubeFixtureWith(t, Options{KubeMaxPageSize: 2})
	for _, path := range []string{"/api/v1/pods", "/api/v1/pods?limit=0"} {
		var list struct {
			Metadata metav1.ListMeta `json:"metadata"`
			Items    []corev1.Pod    `json:"items"`
		}
		code, _, body := do(t, hs, "GET", path, "")
		if err := json.Unmarshal(body, &list); err != nil || code != 200 || len(list.Items) != 3 || list.Metadata.Continue != "" {
			t.Errorf("%s: %d, %d items, continue %q, want all 3: %s", path, code, len(list.Items), list.Metadata.Continue, body)
		}
	}
	var names []string
	pages := 0
	for path := "/api/v1/pods?limit=50"; ; {
		var list struct {
			Metadata metav1.ListMeta `json:"metadata"`
			Items    []corev1.Pod    `json:"items"`
		}
		code, _, body := do(t, hs, "GET", path, "")
		if err := json.Unmarshal(body, &list); err != nil || code != 200 || len(list.Items) > 2 {
			t.Fatalf("%s: %d, %d items: %s", path, code, len(list.Items), body)
		}
		pages++
		for _, p := range list.Items {
			names = append(names, p.Annotations[api.ClusterAnnotation]+"/"+p.Name)
		}
		if list.Metadata.Continue == "" {
			break
		}
		path = "/api/v1/pods?continue=" + url.QueryEscape(list.Metadata.Continue)
	}
	if want := []string{"a/both", "a/only-a", "b/both"}; pages != 2 || !slices.Equal(names, want) {
		t.Errorf("%d pages of %v, want 2 of %v", pages, names, want)
	}
}

// TestKubeLargeList: a list of more than one encoding chunk, without a limit, arrives whole and
// in order, as objects and as a Table; for a client that accepts gzip it is gzipped.
func TestKubeLargeList(t *testing.T) {
	a, b := fakeapi.New(t), fakeapi.New(t)
	var pods []corev1.Pod
	for i := range 1000 + 500 { // more than one encoding chunk (1000)
		pods = append(pods, pod(fmt.Sprintf("p-%05d", i)))
	}
	a.SetPods(pods)
	b.SetPods(pods[:10])
	reg, err := clusterset.New(clusterset.Options{Source: clusterset.Static{{Name: "a", Config: a.Config(), Fingerprint: "1"}, {Name: "b", Config: b.Config(), Fingerprint: "1"}},
		Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	runRegistry(t, reg.Start)
	if missing := reg.WaitForSync(t.Context(), 20*time.Second); missing != nil {
		t.Fatalf("unsynced: %v", missing)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	want := len(pods) + 10
	get := func(accept string) (http.Header, []byte) {
		req, _ := http.NewRequest("GET", hs.URL+"/api/v1/pods", nil)
		req.Header.Set("Accept-Encoding", "gzip") // set by hand: the transport does not decompress
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("%d, Content-Encoding %q", resp.StatusCode, resp.Header.Get("Content-Encoding"))
		}
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header, body
	}
	_, body := get("")
	var list corev1.PodList
	if err := json.Unmarshal(body, &list); err != nil || len(list.Items) != want || list.Continue != "" {
		t.Fatalf("objects: %d items of %d, continue %q, %v", len(list.Items), want, list.Continue, err)
	}
	for i, p := range list.Items {
		wantCluster, wantName := "a", pods[min(i, len(pods)-1)].Name
		if i >= len(pods) {
			wantCluster, wantName = "b", pods[i-len(pods)].Name
		}
		if p.Annotations[api.ClusterAnnotation] != wantCluster || p.Name != wantName {
			t.Fatalf("item %d: %s/%s, want %s/%s", i, p.Annotations[api.ClusterAnnotation], p.Name, wantCluster, wantName)
		}
	}
	_, body = get(tableAccept)
	var tbl metav1.Table
	if err := json.Unmarshal(body, &tbl); err != nil || len(tbl.Rows) != want || len(tbl.ColumnDefinitions) == 0 || tbl.ColumnDefinitions[0].Name != "Cluster" {
		t.Fatalf("table: %d rows of %d, columns %v, %v", len(tbl.Rows), want, tbl.ColumnDefinitions, err)
	}
	if tbl.Rows[want-1].Cells[0] != "b" || tbl.Rows[0].Cells[0] != "a" || tbl.Rows[1000].Cells[1] != pods[1000].Name {
		t.Errorf("table rows out of order: first %v, chunk %v, last %v", tbl.Rows[0].Cells, tbl.Rows[1000].Cells, tbl.Rows[want-1].Cells)
	}
}

// TestKubeWatchWhileInitializing: a watch that starts with the current objects gets 429 with
// Retry-After while a cluster it spans has not synced the resource yet, then proceeds once it
// has; a watch of the synced clusters alone proceeds at once.
func TestKubeWatchWhileInitializing(t *testing.T) {
	a, b := fakeapi.New(t), fakeapi.New(t)
	a.SetPods([]corev1.Pod{pod("in-a")})
	b.SetPods([]corev1.Pod{pod("in-b")})
	b.SetSlow(true)
	t.Cleanup(func() { b.SetSlow(false) })
	reg, err := clusterset.New(clusterset.Options{Source: clusterset.Static{{Name: "a", Config: a.Config(), Fingerprint: "1"}, {Name: "b", Config: b.Config(), Fingerprint: "1"}},
		Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	runRegistry(t, reg.Start)
	waitUntil(t, "a synced, b syncing", 10*time.Second, func() bool {
		ca, _ := reg.ClusterStatus("a")
		cb, _ := reg.ClusterStatus("b")
		return ca.State == clusterset.Synced && len(cb.Resources) == 1 && cb.Resources[0].State == clusterset.Syncing
	})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	watch := func(q string) (int, http.Header, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+"/api/v1/pods?watch=true&timeoutSeconds=1"+q, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		return resp.StatusCode, resp.Header, line
	}
	code, h, body := watch("")
	var st metav1.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 429 || h.Get("Retry-After") == "" ||
		st.Reason != metav1.StatusReasonTooManyRequests || !strings.Contains(st.Message, "b") {
		t.Fatalf("fleet watch while b syncs: %d, Retry-After %q, %s", code, h.Get("Retry-After"), body)
	}
	if code, _, body := watch("&labelSelector=" + url.QueryEscape("multicache.io/cluster=a")); code != 200 || !strings.Contains(body, `"ADDED"`) || !strings.Contains(body, "in-a") {
		t.Fatalf("watch of a alone: %d %s", code, body)
	}
	b.SetSlow(false)
	waitUntil(t, "b synced", 10*time.Second, func() bool { cb, _ := reg.ClusterStatus("b"); return cb.State == clusterset.Synced })
	// Until the watch cache holds b's initial list too, the answer is still 429 (a client
	// retries it); then the watch starts.
	waitUntil(t, "fleet watch served once b synced", 10*time.Second, func() bool {
		code, _, body := watch("")
		if code == 429 && !strings.Contains(body, "b") {
			t.Fatalf("429 naming no waiting cluster: %s", body)
		}
		return code == 200 && strings.Contains(body, `"ADDED"`)
	})
}

// TestKubeTableV1beta1: a client that asks only for the v1beta1 Table gets one.
func TestKubeTableV1beta1(t *testing.T) {
	hs, _ := kubeFixture(t)
	code, _, body := do(t, hs, "GET", "/api/v1/pods", "application/json;as=Table;v=v1beta1;g=meta.k8s.io")
	var tbl metav1.Table
	if err := json.Unmarshal(body, &tbl); err != nil || code != 200 || tbl.APIVersion != "meta.k8s.io/v1beta1" || tbl.Kind != "Table" || len(tbl.Rows) != 3 {
		t.Fatalf("%d %s", code, body)
	}
}

// TestKubeClusterKeyExists: the cluster key's exists requirement keeps every cluster, its
// negation none.
func TestKubeClusterKeyExists(t *testing.T) {
	hs, _ := kubeFixture(t)
	for sel, want := range map[string]int{"multicache.io/cluster": 3, "!multicache.io/cluster": 0, "multicache.io/cluster,app=both": 2} {
		var list corev1.PodList
		code, _, body := do(t, hs, "GET", "/api/v1/pods?labelSelector="+url.QueryEscape(sel), "")
		if err := json.Unmarshal(body, &list); err != nil || code != 200 || len(list.Items) != want {
			t.Errorf("%s: %d, %d items, want %d: %s", sel, code, len(list.Items), want, body)
		}
	}
}

// TestKubeWatchOfNoClusterStaysOpen: a watch whose cluster selector selects no cluster is a
// watch of nothing, open until its timeout (or its client leaves), never a stream that ends at
// once: client-go would back off and relist in a loop, and a fan-in would end the whole watch.
// With sendInitialEvents it first sends the bookmark that ends the (no) initial events.
func TestKubeWatchOfNoClusterStaysOpen(t *testing.T) {
	hs, _ := kubeFixture(t)
	for _, q := range []string{
		"watch=true&labelSelector=multicache.io%2Fcluster%3Dnone&timeoutSeconds=1",
		"watch=true&labelSelector=multicache.io%2Fcluster%3Dnone&timeoutSeconds=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan",
	} {
		start := time.Now()
		evs := watchLines(t, hs, "/api/v1/pods?"+q, "", 1000)
		if took := time.Since(start); took < time.Second {
			t.Errorf("%s: the stream ended after %s, before its timeoutSeconds=1", q, took)
		}
		// Without bookmarks: nothing. With them: the end of the (empty) initial events, then the
		// periodic bookmarks (every 100ms here) of a watch that runs like any other.
		bookmarks := strings.Contains(q, "allowWatchBookmarks")
		if !bookmarks && len(evs) != 0 {
			t.Errorf("%s: events %+v, want none", q, evs)
		}
		if bookmarks {
			if len(evs) < 2 || !strings.Contains(string(evs[0].Object), "k8s.io/initial-events-end") {
				t.Errorf("%s: %d events, want the initial-events-end bookmark and periodic ones", q, len(evs))
			}
			for _, ev := range evs {
				if ev.Type != "BOOKMARK" {
					t.Errorf("%s: a %s event of no cluster", q, ev.Type)
				}
			}
		}
	}
}

// TestOpenAPIV3: each view serves, per group-version, the document of a cluster that serves it,
// read from that cluster once and noted with where it came from and the cluster annotation;
// kube-openapi serves the index and the documents by hash.
func TestOpenAPIV3(t *testing.T) {
	src, a, b := fakeClustersAB(t)
	hs, _ := kubeFixtureOf(t, src, Options{})
	for _, view := range []struct{ prefix, from string }{{"", "a"}, {"/clusters/b", "b"}} {
		code, _, body := do(t, hs, "GET", view.prefix+"/openapi/v3", "")
		var index struct {
			Paths map[string]struct {
				ServerRelativeURL string `json:"serverRelativeURL"`
			} `json:"paths"`
		}
		if err := json.Unmarshal(body, &index); code != 200 || err != nil || len(index.Paths) != 1 || !strings.HasPrefix(index.Paths["api/v1"].ServerRelativeURL, "/openapi/v3/api/v1?hash=") {
			t.Fatalf("%s/openapi/v3: %d %s", view.prefix, code, body)
		}
		code, h, body := do(t, hs, "GET", view.prefix+index.Paths["api/v1"].ServerRelativeURL, "application/json")
		var doc struct {
			Info struct {
				Description string `json:"description"`
			} `json:"info"`
			Components struct {
				Schemas map[string]json.RawMessage `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(body, &doc); code != 200 || err != nil || doc.Components.Schemas["io.k8s.api.core.v1.Pod"] == nil || h.Get("Etag") == "" {
			t.Fatalf("%s api/v1: %d %.300s", view.prefix, code, body)
		}
		if d := doc.Info.Description; !strings.Contains(d, `member cluster "`+view.from+`"`) || !strings.Contains(d, api.ClusterAnnotation) {
			t.Errorf("%s api/v1: description %q, want it read from %s and naming the cluster annotation", view.prefix, d, view.from)
		}
	}
	// Read once per cluster, not per request, however many ask at once.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for _, path := range []string{"/openapi/v3", "/openapi/v3/api/v1", "/clusters/a/openapi/v3/api/v1"} {
				resp, err := http.Get(hs.URL + path)
				if err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	// a's document serves the fleet view and a's own; b's, b's own.
	if a.OpenAPIReads() != 2 || b.OpenAPIReads() != 1 {
		t.Errorf("documents read %d times from a and %d from b, want twice (two views) and once", a.OpenAPIReads(), b.OpenAPIReads())
	}
	for path, want := range map[string]int{"/openapi/v3/apis/apps/v1": 404, "/clusters/zzz/openapi/v3": 404} {
		if code, _, body := do(t, hs, "GET", path, ""); code != want {
			t.Errorf("%s: %d %s, want %d", path, code, body, want)
		}
	}
}

// TestAggregatedDiscovery: client-go's discovery client gets every group in one aggregated
// document per root (apidiscovery.k8s.io/v2), in the fleet view and a cluster's, and a client
// that does not ask for it still gets the legacy documents. A group-version served only by a
// cluster that is not synced is Stale.
func TestAggregatedDiscovery(t *testing.T) {
	hs, s := kubeFixture(t)
	const accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	for _, prefix := range []string{"", "/clusters/b"} {
		code, h, body := do(t, hs, "GET", prefix+"/api", accept)
		var list apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(body, &list); code != 200 || err != nil || !strings.Contains(h.Get("Content-Type"), "as=APIGroupDiscoveryList") {
			t.Fatalf("%s/api aggregated: %d %s %s", prefix, code, h.Get("Content-Type"), body)
		}
		if len(list.Items) != 1 || len(list.Items[0].Versions) != 1 || list.Items[0].Versions[0].Version != "v1" ||
			len(list.Items[0].Versions[0].Resources) != 1 || list.Items[0].Versions[0].Resources[0].Resource != "pods" ||
			list.Items[0].Versions[0].Resources[0].Scope != apidiscoveryv2.ScopeNamespace || list.Items[0].Versions[0].Freshness != apidiscoveryv2.DiscoveryFreshnessCurrent {
			t.Errorf("%s/api aggregated: %+v", prefix, list.Items)
		}
		code, _, body = do(t, hs, "GET", prefix+"/apis", accept)
		list = apidiscoveryv2.APIGroupDiscoveryList{}
		if err := json.Unmarshal(body, &list); code != 200 || err != nil || len(list.Items) != 2 || list.Items[1].Name != "multicache.io" ||
			list.Items[1].Versions[0].Resources[0].Resource != "clusters" || list.Items[0].Versions[0].Resources[0].Resource != "customresourcedefinitions" {
			t.Errorf("%s/apis aggregated: %d %s", prefix, code, body)
		}
		// Legacy, for a client that does not ask.
		var legacy metav1.APIGroupList
		if code, _, body := do(t, hs, "GET", prefix+"/apis", ""); code != 200 || json.Unmarshal(body, &legacy) != nil || legacy.Kind != "APIGroupList" {
			t.Errorf("%s/apis legacy: %d %s", prefix, code, body)
		}
	}
	// client-go's own discovery client reads them, and nothing else.
	var mu sync.Mutex
	var paths []string
	h := s.Handler()
	counted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(counted.Close)
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: counted.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range lists {
		for _, r := range l.APIResources {
			names = append(names, l.GroupVersion+"/"+r.Name)
		}
	}
	if slices.Sort(names); !slices.Equal(names, []string{"apiextensions.k8s.io/v1/customresourcedefinitions", "multicache.io/v1/clusters", "v1/pods"}) {
		t.Errorf("client-go discovery: %v", names)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(paths, []string{"/api", "/apis"}) {
		t.Errorf("client-go discovery asked %v, want /api and /apis alone (aggregated)", paths)
	}
}

// TestAggregatedDiscoveryStale: a group-version served only by clusters that are still
// syncing is Stale, and Current once one has synced.
func TestAggregatedDiscoveryStale(t *testing.T) {
	f := fakeapi.New(t)
	f.SetPods([]corev1.Pod{pod("p")})
	f.SetSlow(true)
	t.Cleanup(func() { f.SetSlow(false) })
	hs := httptest.NewServer(startedServer(t, clusterset.Static{{Name: "a", Config: f.Config(), Fingerprint: "1"}}).Handler())
	t.Cleanup(hs.Close)
	freshness := func() apidiscoveryv2.DiscoveryFreshness {
		var list apidiscoveryv2.APIGroupDiscoveryList
		_, _, body := do(t, hs, "GET", "/api", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
		if json.Unmarshal(body, &list) != nil || len(list.Items) != 1 || len(list.Items[0].Versions) != 1 || len(list.Items[0].Versions[0].Resources) == 0 {
			return ""
		}
		return list.Items[0].Versions[0].Freshness
	}
	waitUntil(t, "pods discovered, still syncing", 10*time.Second, func() bool { return freshness() == apidiscoveryv2.DiscoveryFreshnessStale })
	f.SetSlow(false)
	waitUntil(t, "pods synced", 10*time.Second, func() bool { return freshness() == apidiscoveryv2.DiscoveryFreshnessCurrent })
}

// TestWatchAtTheMomentOfSync: a watch-list that comes the moment the registry says a cluster
// synced is served, not refused with 429, while the watch cache is still taking the initial
// list (it follows the informer within moments); and its initial events, up to the bookmark
// that ends them, hold the whole list.
func TestWatchAtTheMomentOfSync(t *testing.T) {
	const n = 20000
	a := fakeapi.New(t)
	pods := make([]corev1.Pod, n)
	for i := range pods {
		pods[i] = pod("p" + strconv.Itoa(i))
	}
	a.SetPods(pods)
	reg, err := clusterset.New(clusterset.Options{Source: clusterset.Static{{Name: "a", Config: a.Config(), Fingerprint: "1"}},
		Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	events, unsub := reg.Subscribe(64)
	defer unsub()
	runRegistry(t, reg.Start)
	for synced := false; !synced; {
		select {
		case ch := <-events:
			synced = ch.Cluster == "a" && ch.Resource == "pods" && ch.To == clusterset.Synced
		case <-time.After(30 * time.Second):
			t.Fatal("a never synced")
		}
	}
	caughtUp := len(s.local.Unready("pods", nil)) == 0
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+"/api/v1/pods?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=10", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	if resp.StatusCode != http.StatusOK {
		var st metav1.Status
		_ = dec.Decode(&st)
		t.Fatalf("watch-list the moment a synced (the watch cache had its list: %v): %d %s", caughtUp, resp.StatusCode, st.Message)
	}
	added := 0
	for {
		var ev struct {
			Type   string
			Object metav1.PartialObjectMetadata
		}
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("after %d ADDED: %v", added, err)
		}
		if ev.Type == "BOOKMARK" && ev.Object.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
			break
		}
		if ev.Type == "ADDED" {
			added++
		}
	}
	if added != n {
		t.Errorf("initial events before the bookmark that ends them: %d ADDED, want %d", added, n)
	}
	t.Logf("the watch cache had the list when the registry said Synced: %v", caughtUp)
}
