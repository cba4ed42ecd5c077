package server

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/multicache/multicache/internal/fakeapi"
	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/index"
	"github.com/multicache/multicache/pkg/shard"
)

// benchPods is n Pods like a ReplicaSet's: 2 containers, 4 labels, a node out of 200.
func benchPods(cluster string, n int) []corev1.Pod {
	out := make([]corev1.Pod, n)
	for i := range out {
		out[i] = corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "pod-" + strconv.Itoa(i), Namespace: "ns-" + strconv.Itoa(i%20),
				UID: types.UID("uid-" + cluster + "-" + strconv.Itoa(i)), ResourceVersion: strconv.Itoa(10 + i),
				Labels: map[string]string{"app": "app-" + strconv.Itoa(i%50), "tier": "web", "team": "t" + strconv.Itoa(i%7), "pod-template-hash": "abc123"}},
			Spec: corev1.PodSpec{NodeName: "node-" + strconv.Itoa(i%200), Containers: []corev1.Container{
				{Name: "app", Image: "registry.example/app:" + strconv.Itoa(i%10)}, {Name: "sidecar", Image: "registry.example/proxy:1.2"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	return out
}

// benchClusters is 3 fake API servers of 20,000 Pods each, c1 to c3.
func benchClusters(b *testing.B) clusterset.Static {
	var src clusterset.Static
	for i := range 3 {
		name := "c" + strconv.Itoa(i+1)
		f := fakeapi.New(b)
		f.SetPods(benchPods(name, 20000))
		src = append(src, clusterset.ClusterConfig{Name: name, Config: f.Config(), Fingerprint: "1"})
	}
	return src
}

// serveLoop answers req with h for the benchmark's iterations, each a 200.
func serveLoop(b *testing.B, h http.Handler, req *http.Request) {
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("%s: %d %s", req.URL, rec.Code, rec.Body.String())
		}
		b.SetBytes(int64(rec.Body.Len()))
	}
}

// startSynced runs reg until the benchmark ends, and waits for every cluster to sync.
func startSynced(b *testing.B, reg *clusterset.Registry) {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	go func() { _ = reg.Start(ctx) }()
	if missing := reg.WaitForSync(ctx, 2*time.Minute); missing != nil {
		b.Fatal(missing)
	}
}

// BenchmarkHTTP measures the HTTP answer path in process, without the network: selection,
// paging and encoding of pages of Pods from 3 clusters × 20,000 served by fake API servers.
//
//	go test -run '^$' -bench HTTP -count 10 ./pkg/server/ | tee new.txt; benchstat old.txt new.txt
func BenchmarkHTTP(b *testing.B) {
	src := benchClusters(b)
	h := syncedPodServer(b, src, aggregate.IndexSpec{Name: index.NodeName, Func: index.ByNodeName}, aggregate.IndexSpec{Name: index.Label, Func: index.ByLabel})
	servePaths(b, h, []benchPath{
		{"index-page-100", "/multicache/v1/resources/pods?" + url.Values{"fieldSelector": {"spec.nodeName=node-7"}, "limit": {"100"}}.Encode()},
		{"label-page-100", "/multicache/v1/resources/pods?" + url.Values{"cluster": {"c2"}, "namespace": {"ns-3"}, "labelSelector": {"app=app-3,tier=web"}, "limit": {"100"}}.Encode()},
		{"unfiltered-page-500", "/multicache/v1/resources/pods?limit=500"},
		{"get", "/multicache/v1/resources/pods/c3/ns-5/pod-105"},
	})
}

// syncedPodServer is the handler of a server over src's clusters, serving Pods with indexes,
// once every cluster has synced; it runs until the benchmark ends.
func syncedPodServer(b *testing.B, src clusterset.Source, indexes ...aggregate.IndexSpec) http.Handler {
	reg, err := clusterset.New(clusterset.Options{Source: src, Resources: []clusterset.ResourceSpec{{Name: "pods", Indexes: indexes}}, ProbeInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Options{Registry: reg})
	if err != nil {
		b.Fatal(err)
	}
	startSynced(b, reg)
	return s.Handler()
}

// benchPath is a sub-benchmark's name and the path it GETs.
type benchPath struct{ name, path string }

// servePaths runs a sub-benchmark per path, each serving its GET of h over and over.
func servePaths(b *testing.B, h http.Handler, paths []benchPath) {
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			serveLoop(b, h, httptest.NewRequest(http.MethodGet, p.path, nil))
		})
	}
}

// BenchmarkFanout measures a fleet-wide answer merged from two replicas in process: this one
// owns c1 and c2, a peer (served by httptest on loopback) owns c3, each cluster 20,000 Pods
// from fake API servers. Divide ns/op and allocs/op by the items of the answer for the cost
// per item.
//
//	go test -run '^$' -bench Fanout -count 10 ./pkg/server/ | tee new.txt; benchstat old.txt new.txt
func BenchmarkFanout(b *testing.B) {
	s, peer := fannedPair(b, benchClusters(b), func(c string) bool { return c != "c3" })
	// fanned is this replica with the peer; single is one replica that runs all three clusters
	// (the peer, asked directly), for the ratio.
	fanned, single := s.Handler(), peer.Handler()
	for _, tc := range []struct {
		name, path, accept string
		h                  http.Handler
	}{
		{"kube-page-500", "/api/v1/pods?limit=500", "", fanned},
		{"kube-table-page-500", "/api/v1/pods?limit=500", "application/json;as=Table;v=v1;g=meta.k8s.io", fanned},
		{"kube-all-60000", "/api/v1/pods", "", fanned},
		{"native-page-500", "/multicache/v1/resources/pods?limit=500", "", fanned},
		{"single/kube-page-500", "/api/v1/pods?limit=500", "", single},
		{"single/kube-all-60000", "/api/v1/pods", "", single},
		{"single/native-page-500", "/multicache/v1/resources/pods?limit=500", "", single},
		// Watches, read up to the end of their initial events: 60,000 ADDED, then the
		// BOOKMARK that ends them (the Kubernetes API's watch-list; the native API's first).
		{"kube-watchlist-60000", watchListPath, "", fanned},
		{"native-watch-60000", "/multicache/v1/resources/pods?watch=true", "", fanned},
		{"single/kube-watchlist-60000", watchListPath, "", single},
		{"single/native-watch-60000", "/multicache/v1/resources/pods?watch=true", "", single},
	} {
		h := tc.h
		b.Run(tc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			if strings.Contains(tc.path, "watch=") {
				watchLoop(b, h, req)
				return
			}
			serveLoop(b, h, req)
		})
	}
}

const watchListPath = "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"

// watchLoop reads the watch req until its first BOOKMARK, b.N times.
func watchLoop(b *testing.B, h http.Handler, req *http.Request) {
	for b.Loop() {
		ctx, cancel := context.WithCancel(req.Context())
		w := &untilBookmark{header: http.Header{}, cancel: cancel}
		h.ServeHTTP(w, req.WithContext(ctx))
		cancel()
		if w.code != http.StatusOK || !w.seen {
			b.Fatalf("%s: %d, bookmark seen: %v", req.URL, w.code, w.seen)
		}
		b.SetBytes(w.n)
	}
}

// untilBookmark is a watch's client that leaves once it reads a BOOKMARK.
type untilBookmark struct {
	header http.Header
	code   int
	n      int64
	seen   bool
	cancel func()
}

func (u *untilBookmark) Header() http.Header { return u.header }
func (u *untilBookmark) WriteHeader(code int) {
	if u.code == 0 {
		u.code = code
	}
}
func (u *untilBookmark) Flush() {}
func (u *untilBookmark) Write(p []byte) (int, error) {
	u.WriteHeader(http.StatusOK)
	if u.seen {
		return 0, context.Canceled
	}
	u.n += int64(len(p))
	if bytes.Contains(p, []byte(`"type":"BOOKMARK"`)) {
		u.seen = true
		u.cancel()
	}
	return len(p), nil
}

// BenchmarkHTTPWide is BenchmarkHTTP's first pages over S2's width: 1,000 clusters of 1,000
// Pods each (5 fake API servers, each seen as 200 clusters), one replica, and the fleet's
// clusters in both APIs. What a page costs here beyond BenchmarkHTTP's 3 clusters is the cost
// that grows with clusters.
//
//	go test -run '^$' -bench HTTPWide -count 5 ./pkg/server/
func BenchmarkHTTPWide(b *testing.B) {
	h := syncedPodServer(b, wideClusters(b, 1000), aggregate.IndexSpec{Name: index.NodeName, Func: index.ByNodeName})
	servePaths(b, h, []benchPath{
		{"kube-page-500", "/api/v1/pods?limit=500"},
		{"native-page-500", "/multicache/v1/resources/pods?limit=500"},
		{"kube-node-page-500", "/api/v1/pods?limit=500&fieldSelector=spec.nodeName%3Dnode-7"},
		// The fleet's clusters, each judged against the caller's readable ones.
		{"native-clusters", "/multicache/v1/clusters"},
		{"kube-clusters", "/apis/multicache.io/v1/clusters"},
	})
}

// BenchmarkFanoutWide is a fleet of S2's width read through a replica that owns half of it:
// 1,000 clusters of 100 Pods each (5 fake API servers, each seen as 200 clusters), the even
// ones this replica's and the odd ones a peer's (served by httptest on loopback). Each answer
// merges the two parts, each part judged against the clusters it was asked for.
//
//	go test -run '^$' -bench FanoutWide -count 5 ./pkg/server/
func BenchmarkFanoutWide(b *testing.B) {
	src := wideClusters(b, 100)
	mine := sets.New[string]()
	for i, c := range src {
		if i%2 == 0 {
			mine.Insert(c.Name)
		}
	}
	s, _ := fannedPair(b, src, mine.Has)
	servePaths(b, s.Handler(), []benchPath{
		{"native-clusters", "/multicache/v1/clusters"},
		{"kube-clusters", "/apis/multicache.io/v1/clusters"},
		{"kube-page-500", "/api/v1/pods?limit=500"},
		{"native-page-500", "/multicache/v1/resources/pods?limit=500"},
	})
}

// fannedPair serves src's clusters, from one Registry, by two Servers: a peer (served by
// httptest on loopback) that runs them all, and this one, whose fleet gives it the clusters
// mine accepts and the peer the others. It returns once every cluster is synced, and whole in
// both servers' watch caches.
func fannedPair(b *testing.B, src clusterset.Static, mine func(cluster string) bool) (s, peer *Server) {
	reg, err := clusterset.New(clusterset.Options{Source: src, Resources: []clusterset.ResourceSpec{{Name: "pods"}}, ProbeInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	if peer, err = New(Options{Registry: reg}); err != nil {
		b.Fatal(err)
	}
	peerSrv := httptest.NewServer(peer.Handler())
	b.Cleanup(peerSrv.Close)
	var owners []shard.Owner // sorted by cluster, as Fleet.Owners are
	for _, c := range slices.SortedFunc(slices.Values(src), func(x, y clusterset.ClusterConfig) int { return strings.Compare(x.Name, y.Name) }) {
		if mine(c.Name) {
			owners = append(owners, self(c.Name))
		} else {
			owners = append(owners, shard.Owner{Cluster: c.Name, Holder: "p2", URL: peerSrv.URL, Live: true})
		}
	}
	if s, err = New(Options{Registry: reg, Fleet: &staticFleet{owners: owners}}); err != nil {
		b.Fatal(err)
	}
	startSynced(b, reg)
	for len(s.local.Unready("pods", nil)) > 0 || len(peer.local.Unready("pods", nil)) > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	return s, peer
}

// wideClusters are S2's 1,000 clusters: 5 fake API servers of pods Pods each, each seen as
// 200 clusters.
func wideClusters(b *testing.B, pods int) clusterset.Static {
	var src clusterset.Static
	for i := range 5 {
		f := fakeapi.New(b)
		f.SetPods(benchPods("s"+strconv.Itoa(i), pods))
		for j := range 200 {
			src = append(src, clusterset.ClusterConfig{Name: "c" + strconv.Itoa(i) + "-" + strconv.Itoa(j), Config: f.Config(), Fingerprint: "1"})
		}
	}
	return src
}
