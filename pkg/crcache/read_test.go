package crcache

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
)

func names(objs []string) string { sort.Strings(objs); return strings.Join(objs, ",") }

// TestReadsInEveryShape: Get and List read typed objects, unstructured ones and metadata
// only, as copies; List takes a namespace, labels, indexed fields and a limit, as
// controller-runtime's informer cache does, and refuses what it does not.
func TestReadsInEveryShape(t *testing.T) {
	fl, start := fakeFleet(t)
	byNode := func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }
	byName := func(o client.Object) []string { return []string{o.GetName()} }
	ctx := context.Background()
	c := fl.Cache("a")
	for field, fn := range map[string]client.IndexerFunc{"spec.nodeName": byNode, "metadata.name": byName} {
		if err := c.IndexField(ctx, &corev1.Pod{}, field, fn); err != nil {
			t.Fatal(err)
		}
	}
	start()
	waitSynced(t, c)

	var p corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "p1"}, &p); err != nil || p.Spec.NodeName != "n1" || p.Kind != "Pod" || p.APIVersion != "v1" {
		t.Errorf("Get p1: %v, %s/%s on %q", err, p.APIVersion, p.Kind, p.Spec.NodeName)
	}
	p.Spec.NodeName = "changed" // a copy: the cache is not touched (the mutation detector would say)
	var again corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "p1"}, &again); err != nil || again.Spec.NodeName != "n1" {
		t.Errorf("after changing a read copy, the cache holds node %q (%v)", again.Spec.NodeName, err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "p2"}, u); err != nil || u.GetName() != "p2" {
		t.Errorf("Get p2 unstructured: %v, %q", err, u.GetName())
	} else if node, _, _ := unstructured.NestedString(u.Object, "spec", "nodeName"); node != "n2" {
		t.Errorf("p2 unstructured is on %q, want n2", node)
	}
	pm := &metav1.PartialObjectMetadata{}
	pm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "p2"}, pm); err != nil || pm.Name != "p2" || pm.ResourceVersion != "7" {
		t.Errorf("Get p2 as metadata: %v, %+v", err, pm.ObjectMeta)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "p3"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get p3, which cluster b holds, from a: %v, want NotFound", err)
	}

	list := func(l client.ObjectList, opts ...client.ListOption) string {
		t.Helper()
		if err := c.List(ctx, l, opts...); err != nil {
			t.Errorf("List %T %v: %v", l, opts, err)
			return ""
		}
		var got []string
		switch l := l.(type) {
		case *corev1.PodList:
			for _, o := range l.Items {
				got = append(got, o.Name)
			}
		case *unstructured.UnstructuredList:
			for _, o := range l.Items {
				got = append(got, o.GetName())
			}
		case *metav1.PartialObjectMetadataList:
			for _, o := range l.Items {
				got = append(got, o.Name)
			}
		}
		return names(got)
	}
	ul := &unstructured.UnstructuredList{}
	ul.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	ml := &metav1.PartialObjectMetadataList{}
	ml.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	for name, tc := range map[string]struct {
		l    client.ObjectList
		opts []client.ListOption
		want string
	}{
		"all":                            {&corev1.PodList{}, nil, "p1,p2"},
		"unstructured":                   {ul, nil, "p1,p2"},
		"metadata":                       {ml, nil, "p1,p2"},
		"namespace":                      {&corev1.PodList{}, []client.ListOption{client.InNamespace("ns")}, "p1,p2"},
		"another namespace":              {&corev1.PodList{}, []client.ListOption{client.InNamespace("other")}, ""},
		"labels":                         {&corev1.PodList{}, []client.ListOption{client.MatchingLabels{"app": "x"}}, ""},
		"one indexed field":              {&corev1.PodList{}, []client.ListOption{client.MatchingFields{"spec.nodeName": "n2"}}, "p2"},
		"two indexed fields":             {&corev1.PodList{}, []client.ListOption{client.MatchingFields{"spec.nodeName": "n1", "metadata.name": "p1"}}, "p1"},
		"two indexed fields, no match":   {&corev1.PodList{}, []client.ListOption{client.MatchingFields{"spec.nodeName": "n1", "metadata.name": "p2"}}, ""},
		"indexed field in the namespace": {&corev1.PodList{}, []client.ListOption{client.InNamespace("ns"), client.MatchingFields{"spec.nodeName": "n1"}}, "p1"},
		"limit":                          {&corev1.PodList{}, []client.ListOption{client.Limit(1)}, "p1"},
	} {
		if got := list(tc.l, tc.opts...); got != tc.want && !(name == "limit" && (got == "p1" || got == "p2")) {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}

	for name, opts := range map[string][]client.ListOption{
		"a continue":           {client.Continue("x")},
		"a field not indexed":  {client.MatchingFields{"spec.nodeName": "n1", "status.phase": "Running"}},
		"a non-exact field":    {client.MatchingFieldsSelector{Selector: fields.OneTermNotEqualSelector("spec.nodeName", "n1")}},
		"an empty field match": {client.MatchingFieldsSelector{Selector: fields.Everything()}},
	} {
		if err := c.List(ctx, &corev1.PodList{}, opts...); err == nil {
			t.Errorf("List with %s: no error", name)
		}
	}
	// A label selector the cache evaluates like the API server's.
	sel, _ := labels.Parse("!app")
	if got := list(&corev1.PodList{}, client.MatchingLabelsSelector{Selector: sel}); got != "p1,p2" {
		t.Errorf("!app: %q, want both Pods", got)
	}
}

// TestReadErrors: a kind the Registry does not cache, and a cluster not in the fleet, are
// errors that say so; a read of either does not wait for ever.
func TestReadErrors(t *testing.T) {
	fl, start := fakeFleet(t)
	start()
	waitSynced(t, fl.Cache("a"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := fl.Cache("a").Get(ctx, client.ObjectKey{Namespace: "ns", Name: "x"}, &corev1.ConfigMap{})
	var nc *cache.ErrResourceNotCached
	if !errors.As(err, &nc) || !strings.Contains(err.Error(), "pods") {
		t.Errorf("a ConfigMap, which the Registry does not cache: %v, want ErrResourceNotCached naming what it caches", err)
	}
	err = fl.Cache("nowhere").List(ctx, &corev1.PodList{})
	if err == nil || !strings.Contains(err.Error(), `cluster "nowhere" is not in the fleet`) {
		t.Errorf("a cluster not in the fleet: %v", err)
	}
	if _, err := fl.Cache("nowhere").GetInformerForKind(ctx, corev1.SchemeGroupVersion.WithKind("Pod")); err == nil {
		t.Error("an informer of a cluster not in the fleet: no error")
	}
	if _, err := NewFleet(nil, Options{}); err == nil {
		t.Error("NewFleet without a Registry: no error")
	}
}

// TestInformerForKind: an informer got by kind tells a handler its cluster's objects, syncs,
// is running, takes indexes for the whole fleet, and removes only what it added.
func TestInformerForKind(t *testing.T) {
	fl, start := fakeFleet(t)
	start()
	c := fl.Cache("b")
	ctx := context.Background()
	inf, err := c.GetInformerForKind(ctx, corev1.SchemeGroupVersion.WithKind("Pod"))
	if err != nil {
		t.Fatal(err)
	}
	if !inf.HasSynced() || inf.IsStopped() {
		t.Errorf("after GetInformerForKind: synced %v, stopped %v; want synced and running", inf.HasSynced(), inf.IsStopped())
	}
	select {
	case <-inf.HasSyncedChecker().Done():
	case <-time.After(5 * time.Second):
		t.Error("HasSyncedChecker of a synced informer is not done")
	}
	period := time.Second
	var n counter
	h, err := inf.AddEventHandlerWithOptions(&n, toolscache.HandlerOptions{ResyncPeriod: &period})
	if err != nil {
		t.Fatal(err)
	}
	checker := h.(interface {
		HasSyncedChecker() toolscache.DoneChecker
	}).HasSyncedChecker()
	select {
	case <-checker.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's checker never finished")
	}
	if checker.Name() == "" {
		t.Error("the handler's checker has no name")
	}
	if adds, _, _ := n.get(); adds != 1 {
		t.Errorf("told of %d adds, want cluster b's 1 Pod", adds)
	}
	if err := inf.RemoveEventHandler(h); err != nil {
		t.Fatal(err)
	}
	if err := inf.RemoveEventHandler(nil); err == nil {
		t.Error("removing a handle this informer did not add: no error")
	}
	if _, err := inf.AddEventHandler(nil); err == nil {
		t.Error("a nil handler: no error")
	}

	byNode := toolscache.Indexers{"by-node": func(o any) ([]string, error) { return []string{o.(*corev1.Pod).Spec.NodeName}, nil }}
	if err := inf.AddIndexers(byNode); err != nil {
		t.Fatal(err)
	}
	if err := inf.AddIndexers(byNode); err == nil {
		t.Error("an index name taken twice: no error")
	}
	// b's informer waited for cluster b alone: cluster a's list may still be on its way.
	waitSynced(t, fl.Cache("a"))
	store, _ := fl.reg.Aggregate("pods")
	a, _ := store.Cluster("a")
	if objs, err := a.ByIndex("by-node", "n2"); err != nil || len(objs) != 1 {
		t.Errorf("the index added through b's informer, in cluster a: %d objects (%v), want p2", len(objs), err)
	}
}

// aware records the clusters a Provider engages, and those whose engagement ended.
type aware struct {
	mu      sync.Mutex
	engaged map[string]cluster.Cluster
	ended   []string
}

func (a *aware) Engage(ctx context.Context, name string, cl cluster.Cluster) error {
	a.mu.Lock()
	a.engaged[name] = cl
	a.mu.Unlock()
	go func() {
		<-ctx.Done()
		a.mu.Lock()
		a.ended = append(a.ended, name)
		a.mu.Unlock()
	}()
	return nil
}

// TestProviderEngagesTheFleet: a Provider engages every cluster with a cluster.Cluster that
// reads through that cluster's Cache; Get finds them, and its end disengages them all.
func TestProviderEngagesTheFleet(t *testing.T) {
	fl, start := fakeFleet(t)
	start()
	p := fl.Provider(ProviderOptions{Resync: 100 * time.Millisecond})
	aw := &aware{engaged: map[string]cluster.Cluster{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx, aw) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		aw.mu.Lock()
		n := len(aw.engaged)
		aw.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("engaged %d of 2 clusters in 10 s", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cl, err := p.Get(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := cl.GetCache().List(ctx, &pods); err != nil || len(pods.Items) != 1 || pods.Items[0].Name != "p3" {
		t.Errorf("cluster b's cluster.Cluster reads %d Pods (%v), want p3", len(pods.Items), err)
	}
	if _, err := p.Get(ctx, "nowhere"); !errors.Is(err, ErrClusterNotFound) {
		t.Errorf("Get of a cluster not engaged: %v, want ErrClusterNotFound", err)
	}
	if err := p.IndexField(ctx, &corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }); err != nil {
		t.Fatal(err)
	}
	src := Kind(ctx, "b", cl, &corev1.Pod{})
	if s, ok := src.(interface{ String() string }); !ok || !strings.HasPrefix(s.String(), "crcache.Kind(") {
		t.Errorf("Kind's source reads as %v", src)
	}
	if r := (Request{Cluster: "b", NamespacedName: client.ObjectKey{Namespace: "ns", Name: "p3"}}); r.String() != "b/ns/p3" {
		t.Errorf("Request reads as %q, want b/ns/p3", r.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
	aw.mu.Lock()
	ended := slices.Clone(aw.ended)
	aw.mu.Unlock()
	deadline = time.Now().Add(5 * time.Second)
	for len(ended) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		aw.mu.Lock()
		ended = slices.Clone(aw.ended)
		aw.mu.Unlock()
	}
	if names(ended) != "a,b" {
		t.Errorf("after Start ended, engagements ended: %v, want a and b", ended)
	}
}
