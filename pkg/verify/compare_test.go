package verify

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/aggregate"
)

// metadataServer answers metadata-only lists of configmaps with objs, and counts the
// namespaces it was asked for. A list of another path is a 404, and fail makes every list a 500.
func metadataServer(t *testing.T, fail bool, objs ...metav1.PartialObjectMetadata) (*rest.Config, *[]string) {
	t.Helper()
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns := ""
		switch {
		case r.URL.Path == "/api/v1/configmaps":
		case strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/") && strings.HasSuffix(r.URL.Path, "/configmaps"):
			ns = strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/api/v1/namespaces/"), "/configmaps")
		default:
			http.NotFound(w, r)
			return
		}
		asked = append(asked, ns)
		if fail {
			http.Error(w, "etcd is down", http.StatusInternalServerError)
			return
		}
		if !strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadataList") {
			http.Error(w, "Truth must ask for metadata only", http.StatusNotAcceptable)
			return
		}
		list := metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"}}
		for _, o := range objs {
			if ns == "" || o.Namespace == ns {
				o.TypeMeta = metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}
				list.Items = append(list.Items, o)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&list)
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}, &asked
}

func objMeta(ns, name, uid, rv string) metav1.PartialObjectMetadata {
	return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), ResourceVersion: rv}}
}

// cachedFleet is an Aggregate whose members hold the given configmaps, synced.
func cachedFleet(t *testing.T, members map[string][]corev1.ConfigMap) *aggregate.Aggregate {
	t.Helper()
	agg, ms, err := aggregate.New(aggregate.Options{Resource: "configmaps"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for cluster, items := range members {
		lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
				return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "100"}, Items: items}, nil
			},
			WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
		}, listOnly{})
		inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
		if err := ms.Join(cluster, inf); err != nil {
			t.Fatal(err)
		}
		go inf.Run(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatalf("cluster %s did not sync", cluster)
		}
	}
	if unsynced := agg.WaitForSync(ctx, 10*time.Second); len(unsynced) > 0 {
		t.Fatalf("unsynced: %v", unsynced)
	}
	return agg
}

// listOnly says the fake source cannot stream a watch-list: the reflector lists.
type listOnly struct{}

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

func cm(ns, name, uid, rv string) corev1.ConfigMap {
	return corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), ResourceVersion: rv}}
}

// TestCompareFindsEveryKind: Compare lists each server and reports what the cache misses,
// holds in excess or holds at another version, per cluster; a cluster the cache has not joined
// is all missing.
func TestCompareFindsEveryKind(t *testing.T) {
	east, _ := metadataServer(t, false, objMeta("a", "same", "u1", "1"), objMeta("a", "stale", "u2", "5"), objMeta("b", "missing", "u3", "2"))
	west, _ := metadataServer(t, false, objMeta("a", "unjoined", "u9", "1"))
	agg := cachedFleet(t, map[string][]corev1.ConfigMap{
		"east": {cm("a", "same", "u1", "1"), cm("a", "stale", "u2", "4"), cm("a", "extra", "u4", "3")},
	})
	gvr := corev1.SchemeGroupVersion.WithResource("configmaps")
	rep, err := Compare(context.Background(), agg, gvr, "", map[string]*rest.Config{"east": east, "west": west})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range rep.Diverged {
		got = append(got, d.String())
	}
	want := []string{"extra east|a/extra", "stale east|a/stale: cache u2/4, server u2/5", "missing east|b/missing", "missing west|a/unjoined"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || rep.Objects != 4 || rep.Resource != "configmaps" {
		t.Errorf("Compare: %d objects, diverged:\n%s\nwant 4 objects, diverged:\n%s", rep.Objects, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCompareInANamespace: a namespace limits both sides, so objects elsewhere are neither
// missing nor extra.
func TestCompareInANamespace(t *testing.T) {
	east, asked := metadataServer(t, false, objMeta("a", "same", "u1", "1"), objMeta("b", "elsewhere", "u3", "2"))
	agg := cachedFleet(t, map[string][]corev1.ConfigMap{
		"east": {cm("a", "same", "u1", "1"), cm("c", "also-elsewhere", "u4", "3")},
	})
	rep, err := Compare(context.Background(), agg, corev1.SchemeGroupVersion.WithResource("configmaps"), "a", map[string]*rest.Config{"east": east})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Diverged) != 0 || rep.Objects != 1 {
		t.Errorf("in namespace a: %s; want 1 object, converged", rep.Summary())
	}
	if len(*asked) != 1 || (*asked)[0] != "a" {
		t.Errorf("the server was asked for namespaces %q, want [a] only", *asked)
	}
}

// TestTruthNamesTheFailingCluster: a server that cannot list is an error that names its
// cluster and the resource, and no report claims convergence.
func TestTruthNamesTheFailingCluster(t *testing.T) {
	bad, _ := metadataServer(t, true)
	agg := cachedFleet(t, map[string][]corev1.ConfigMap{"broken": nil})
	_, err := Compare(context.Background(), agg, corev1.SchemeGroupVersion.WithResource("configmaps"), "", map[string]*rest.Config{"broken": bad})
	if err == nil || !strings.Contains(err.Error(), `cluster "broken": list configmaps`) {
		t.Errorf("Compare against a failing server: %v, want an error naming the cluster and resource", err)
	}
	_, err = Truth(context.Background(), corev1.SchemeGroupVersion.WithResource("configmaps"), "", map[string]*rest.Config{"nohost": {Host: "http://[::1"}})
	if err == nil || !strings.Contains(err.Error(), `cluster "nohost"`) {
		t.Errorf("Truth with a malformed host: %v, want an error naming the cluster", err)
	}
}
