package integration

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/multicache/multicache/pkg/clusterset"
	mcrcache "github.com/multicache/multicache/pkg/crcache"
	"github.com/multicache/multicache/pkg/sources"
	"github.com/multicache/multicache/test/harness"
)

// TestControllerRuntimeCache reads the local fleet through crcache.Cache as controller-runtime
// code reads its informer cache, and compares every answer with what the cluster's API server
// lists: get (typed, unstructured, metadata), not found, list by namespace, labels, limit,
// and fields indexed with IndexField, the errors of an unindexed or non-exact field selector
// and of a kind that is not cached, a read that waits for an unsynced cluster, informer
// handlers bound to their cluster, a cluster.Cluster whose client reads through the Cache,
// and a cluster that leaves the fleet.
func TestControllerRuntimeCache(t *testing.T) {
	env := harness.Start(t, harness.Options{Timeout: 8 * time.Minute})
	ctx, f := env.Ctx, env.Fleet
	names := f.Names()
	const ns = "crc"
	// In each cluster: ConfigMaps cm-0…cm-5, labelled by parity, and team=<cluster> on one.
	for i, name := range names {
		cs, _ := f.Clientset(name)
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		for j := range 6 {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", j), Namespace: ns,
				Labels: map[string]string{"parity": []string{"even", "odd"}[j%2]}}, Data: map[string]string{"owner": fmt.Sprintf("team-%d", (i+j)%3)}}
			if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// Every cluster, and one whose server does not answer: it never syncs.
	withBroken := func(c *clientcmdapi.Config) {
		c.Clusters["broken"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
		c.AuthInfos["broken"] = &clientcmdapi.AuthInfo{Token: "x"}
		c.Contexts["broken"] = &clientcmdapi.Context{Cluster: "broken", AuthInfo: "broken"}
	}
	writeKubeconfig(t, f, kubeconfig, names, withBroken)
	src, err := sources.NewKubeconfig(sources.KubeconfigOptions{Paths: []string{kubeconfig}, PollInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := clusterset.New(clusterset.Options{Source: src, Logger: zaptest.NewLogger(t), Resources: []clusterset.ResourceSpec{{Name: "configmaps"}, {Name: "namespaces"}}})
	if err != nil {
		t.Fatal(err)
	}
	fl, err := mcrcache.NewFleet(reg, mcrcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = fl.Start(runCtx) }()

	// A Provider of the same Fleet, told of every engagement.
	aware := &recordingAware{ctxs: map[string]context.Context{}}
	provider := fl.Provider(mcrcache.ProviderOptions{Resync: 200 * time.Millisecond})
	go func() { _ = provider.Start(runCtx, aware) }()

	c1 := fl.Cache(names[0])
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !c1.WaitForCacheSync(waitCtx) {
		t.Fatalf("%s never synced", names[0])
	}
	cs1, _ := f.Clientset(names[0])
	truth := func(sel string) []string {
		l, err := cs1.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, cm := range l.Items {
			out = append(out, cm.Name+"@"+cm.ResourceVersion)
		}
		sort.Strings(out)
		return out
	}
	names0 := func(items []corev1.ConfigMap) []string {
		var out []string
		for _, cm := range items {
			out = append(out, cm.Name+"@"+cm.ResourceVersion)
		}
		sort.Strings(out)
		return out
	}
	key := client.ObjectKey{Namespace: ns, Name: "cm-1"}
	want, err := cs1.CoreV1().ConfigMaps(ns).Get(ctx, "cm-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("get", func(t *testing.T) {
		var cm corev1.ConfigMap
		if err := c1.Get(ctx, key, &cm); err != nil {
			t.Fatal(err)
		}
		if cm.ResourceVersion != want.ResourceVersion || cm.Data["owner"] != want.Data["owner"] || cm.Kind != "ConfigMap" || cm.APIVersion != "v1" {
			t.Errorf("typed get: %s@%s %v %s/%s, the API server has %s@%s %v", cm.Name, cm.ResourceVersion, cm.Data, cm.APIVersion, cm.Kind, want.Name, want.ResourceVersion, want.Data)
		}
		cm.Data["owner"] = "mutated" // a copy: the next read must not see it
		var again corev1.ConfigMap
		_ = c1.Get(ctx, key, &again)
		if again.Data["owner"] != want.Data["owner"] {
			t.Error("Get handed out the cached object: a change to the answer reached the cache")
		}
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		if err := c1.Get(ctx, key, u); err != nil || u.GetResourceVersion() != want.ResourceVersion || u.Object["data"].(map[string]any)["owner"] != want.Data["owner"] {
			t.Errorf("unstructured get: %v %v", err, u.Object)
		}
		pm := &metav1.PartialObjectMetadata{}
		pm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		if err := c1.Get(ctx, key, pm); err != nil || pm.ResourceVersion != want.ResourceVersion || pm.Labels["parity"] != "odd" {
			t.Errorf("metadata get: %v %+v", err, pm.ObjectMeta)
		}
	})

	t.Run("not found", func(t *testing.T) {
		err := c1.Get(ctx, client.ObjectKey{Namespace: ns, Name: "nope"}, &corev1.ConfigMap{})
		var st apierrors.APIStatus
		if !apierrors.IsNotFound(err) || !errors.As(err, &st) || st.Status().Details.Kind != "configmaps" {
			t.Errorf("a missing ConfigMap: %v, want NotFound for configmaps", err)
		}
	})

	t.Run("list", func(t *testing.T) {
		var l corev1.ConfigMapList
		if err := c1.List(ctx, &l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if got, w := names0(l.Items), truth(""); !slices.Equal(got, w) {
			t.Errorf("namespace: %v, the API server %v", got, w)
		}
		if err := c1.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{"parity": "even"}); err != nil {
			t.Fatal(err)
		}
		if got, w := names0(l.Items), truth("parity=even"); !slices.Equal(got, w) || len(w) != 3 {
			t.Errorf("labels: %v, the API server %v", got, w)
		}
		// Items are copies, with their kind set.
		for i := range l.Items {
			if l.Items[i].Kind != "ConfigMap" || l.Items[i].APIVersion != "v1" {
				t.Errorf("a listed item's kind: %q %q", l.Items[i].APIVersion, l.Items[i].Kind)
			}
			l.Items[i].Labels["parity"] = "mutated"
		}
		var again corev1.ConfigMapList
		if err := c1.List(ctx, &again, client.InNamespace(ns), client.MatchingLabels{"parity": "even"}); err != nil || len(again.Items) != 3 {
			t.Errorf("after changing the listed items: %d items, %v: the list handed out cached objects", len(again.Items), err)
		}
		// A cluster-scoped object: the key's namespace, if any, is not part of it.
		var nsObj corev1.Namespace
		if err := c1.Get(ctx, client.ObjectKey{Namespace: "anything", Name: ns}, &nsObj); err != nil || nsObj.Name != ns {
			t.Errorf("a Namespace, with a namespace in the key: %v", err)
		}
		if err := c1.List(ctx, &l, client.InNamespace(ns), client.Limit(2)); err != nil || len(l.Items) != 2 {
			t.Errorf("limit 2: %d items, %v", len(l.Items), err)
		}
		ul := &unstructured.UnstructuredList{}
		ul.SetAPIVersion("v1")
		ul.SetKind("ConfigMapList")
		if err := c1.List(ctx, ul, client.InNamespace(ns)); err != nil || len(ul.Items) != 6 {
			t.Errorf("unstructured list: %d items, %v", len(ul.Items), err)
		}
		if err := c1.List(ctx, &l, client.Continue("x")); err == nil {
			t.Error("a continue token was accepted: the cache has none")
		}
	})

	t.Run("IndexField", func(t *testing.T) {
		owner := func(o client.Object) []string { return []string{o.(*corev1.ConfigMap).Data["owner"]} }
		if err := c1.IndexField(ctx, &corev1.ConfigMap{}, "data.owner", owner); err != nil {
			t.Fatal(err)
		}
		// From another cluster's Cache, the same field again: the fleet's index stays.
		if err := fl.Cache(names[1]).IndexField(ctx, &corev1.ConfigMap{}, "data.owner", owner); err != nil {
			t.Errorf("the same field from another cluster's Cache: %v", err)
		}
		all, _ := cs1.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
		for _, scope := range []string{ns, ""} {
			var l corev1.ConfigMapList
			if err := c1.List(ctx, &l, client.InNamespace(scope), client.MatchingFields{"data.owner": "team-1"}); err != nil {
				t.Fatal(err)
			}
			var w []string
			for _, cm := range all.Items {
				if cm.Data["owner"] == "team-1" && (scope == "" || cm.Namespace == scope) {
					w = append(w, cm.Name+"@"+cm.ResourceVersion)
				}
			}
			sort.Strings(w)
			if got := names0(l.Items); !slices.Equal(got, w) || len(w) == 0 {
				t.Errorf("namespace %q, data.owner=team-1: %v, the API server %v", scope, got, w)
			}
		}
		// Two fields: the first by its index, the second filtered.
		_ = c1.IndexField(ctx, &corev1.ConfigMap{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} })
		var l corev1.ConfigMapList
		if err := c1.List(ctx, &l, client.InNamespace(ns), client.MatchingFields{"data.owner": want.Data["owner"], "metadata.name": "cm-1"}); err != nil || len(l.Items) != 1 || l.Items[0].Name != "cm-1" {
			t.Errorf("two fields: %v %v", names0(l.Items), err)
		}
		if err := c1.List(ctx, &l, client.MatchingFields{"data.nothing": "x"}); err == nil || !strings.Contains(err.Error(), "field:data.nothing") {
			t.Errorf("a field without an index: %v, want an error naming its index", err)
		}
		if err := c1.List(ctx, &l, &client.ListOptions{FieldSelector: fields.OneTermNotEqualSelector("data.owner", "x")}); err == nil || !strings.Contains(err.Error(), "non-exact") {
			t.Errorf("a non-exact field selector: %v", err)
		}
	})

	t.Run("kind not cached", func(t *testing.T) {
		err := c1.Get(ctx, client.ObjectKey{Namespace: ns, Name: "x"}, &corev1.Secret{})
		var nc *crcache.ErrResourceNotCached
		if !errors.As(err, &nc) || nc.GVK.Kind != "Secret" {
			t.Errorf("a Secret, which the Registry does not cache: %v", err)
		}
	})

	t.Run("unsynced", func(t *testing.T) {
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		err := fl.Cache("broken").Get(short, key, &corev1.ConfigMap{})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a read of a cluster that never syncs: %v, want to wait for it until the context ends", err)
		}
		if fl.Cache("broken").WaitForCacheSync(short) {
			t.Error("WaitForCacheSync of a cluster that never syncs said it did")
		}
	})

	t.Run("informer", func(t *testing.T) {
		inf, err := c1.GetInformer(ctx, &corev1.ConfigMap{})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		seen := map[string]bool{}
		reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
			m, _ := meta.Accessor(obj)
			mu.Lock()
			seen[m.GetNamespace()+"/"+m.GetName()] = true
			mu.Unlock()
		}})
		if err != nil {
			t.Fatal(err)
		}
		harness.WaitFor(t, "the handler's initial list", 30*time.Second, reg.HasSynced)
		for i, name := range names[:2] {
			cs, _ := f.Clientset(name)
			if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("new-%d", i), Namespace: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		harness.WaitFor(t, "the handler told of the ConfigMap created in its cluster", 30*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return seen[ns+"/new-0"]
		})
		// The other cluster's ConfigMap reached the Registry (its own Cache reads it) and
		// never this cluster's handler.
		harness.WaitFor(t, "the other cluster's ConfigMap cached", 30*time.Second, func() bool {
			return fl.Cache(names[1]).Get(ctx, client.ObjectKey{Namespace: ns, Name: "new-1"}, &corev1.ConfigMap{}) == nil
		})
		// Exactly its cluster's objects, as its API server lists them.
		all, err := cs1.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var w, got []string
		for _, cm := range all.Items {
			w = append(w, cm.Namespace+"/"+cm.Name)
		}
		mu.Lock()
		for k := range seen {
			got = append(got, k)
		}
		mu.Unlock()
		sort.Strings(w)
		sort.Strings(got)
		if !slices.Equal(got, w) {
			t.Errorf("the handler of %s was told of %v; its API server lists %v", names[0], got, w)
		}
		if err := inf.RemoveEventHandler(reg); err != nil {
			t.Error(err)
		}
	})

	t.Run("cluster.Cluster", func(t *testing.T) {
		cl, err := cluster.New(f.Clusters[0].Config(), func(o *cluster.Options) { o.NewCache = fl.NewCacheFunc(names[0]) })
		if err != nil {
			t.Fatal(err)
		}
		clCtx, stopCl := context.WithCancel(ctx)
		defer stopCl()
		go func() { _ = cl.Start(clCtx) }()
		if !cl.GetCache().WaitForCacheSync(ctx) {
			t.Fatal("the cluster's cache never synced")
		}
		// Writes go to the API server; reads come from the Cache, which sees them.
		c := cl.GetClient()
		if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "via-client", Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
		harness.WaitFor(t, "the client reads its own write through the Cache", 30*time.Second, func() bool {
			return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "via-client"}, &corev1.ConfigMap{}) == nil
		})
		var l corev1.ConfigMapList
		if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(labels.Set{"parity": "odd"})}); err != nil {
			t.Fatal(err)
		}
		if got, w := names0(l.Items), truth("parity=odd"); !slices.Equal(got, w) {
			t.Errorf("the client's list: %v, the API server %v", got, w)
		}
	})

	t.Run("manager.Manager", func(t *testing.T) {
		mgr, err := manager.New(f.Clusters[0].Config(), manager.Options{NewCache: fl.NewCacheFunc(names[0]),
			Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
		if err != nil {
			t.Fatal(err)
		}
		mgrCtx, stopMgr := context.WithCancel(ctx)
		defer stopMgr()
		go func() { _ = mgr.Start(mgrCtx) }()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			t.Fatal("the manager's cache never synced")
		}
		var cm corev1.ConfigMap
		if err := mgr.GetClient().Get(ctx, key, &cm); err != nil || cm.ResourceVersion != want.ResourceVersion {
			t.Errorf("the manager's client: %v, %s@%s, the API server has %s", err, cm.Name, cm.ResourceVersion, want.ResourceVersion)
		}
	})

	t.Run("Provider", func(t *testing.T) {
		harness.WaitFor(t, "every cluster engaged", 30*time.Second, func() bool {
			aware.mu.Lock()
			defer aware.mu.Unlock()
			for _, n := range names {
				if aware.ctxs[n] == nil {
					return false
				}
			}
			return true
		})
		cl, err := provider.Get(ctx, names[0])
		if err != nil {
			t.Fatal(err)
		}
		var cm corev1.ConfigMap
		if err := cl.GetClient().Get(ctx, key, &cm); err != nil || cm.ResourceVersion != want.ResourceVersion {
			t.Errorf("an engaged cluster's client: %v", err)
		}
		if _, err := provider.Get(ctx, "nope"); !errors.Is(err, mcrcache.ErrClusterNotFound) {
			t.Errorf("Get of a cluster not in the fleet: %v", err)
		}
	})

	t.Run("a cluster that leaves", func(t *testing.T) {
		last := names[len(names)-1]
		c3 := fl.Cache(last)
		if err := c3.Get(ctx, key, &corev1.ConfigMap{}); err != nil {
			t.Fatalf("before it leaves: %v", err)
		}
		writeKubeconfig(t, f, kubeconfig, names[:len(names)-1], withBroken)
		// The Registry drops the cluster first, then its stack stops and leaves the aggregate;
		// until then its objects are the fleet's, in every read (a list of the fleet too).
		agg, _ := reg.Aggregate("configmaps")
		harness.WaitFor(t, last+" out of the Registry and the aggregate", 30*time.Second, func() bool {
			_, member := agg.Cluster(last)
			return !slices.Contains(reg.Clusters(), last) && !member
		})
		err := c3.Get(ctx, key, &corev1.ConfigMap{})
		if err == nil || !strings.Contains(err.Error(), "not in the fleet") {
			t.Errorf("a read of a cluster that left: %v", err)
		}
		if c3.WaitForCacheSync(ctx) {
			t.Error("WaitForCacheSync of a cluster that left said it synced")
		}
		// The Provider disengages it: its engagement's context ends, and Get no longer finds it.
		aware.mu.Lock()
		engaged := aware.ctxs[last]
		aware.mu.Unlock()
		select {
		case <-engaged.Done():
		case <-time.After(30 * time.Second):
			t.Error("the engagement of a cluster that left never ended")
		}
		if _, err := provider.Get(ctx, last); !errors.Is(err, mcrcache.ErrClusterNotFound) {
			t.Errorf("Get of a cluster that left: %v", err)
		}
	})

	t.Run("a cluster that comes back", func(t *testing.T) {
		last := names[len(names)-1]
		writeKubeconfig(t, f, kubeconfig, names, withBroken)
		harness.WaitFor(t, last+" back in the Registry", 30*time.Second, func() bool { return slices.Contains(reg.Clusters(), last) })
		c3 := fl.Cache(last)
		if !c3.WaitForCacheSync(ctx) {
			t.Fatal("it never synced again")
		}
		// The field index added before it left is computed in its new stack too.
		cs3, _ := f.Clientset(last)
		all, err := cs3.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var w []string
		for _, cm := range all.Items {
			if cm.Data["owner"] == "team-2" {
				w = append(w, cm.Name+"@"+cm.ResourceVersion)
			}
		}
		sort.Strings(w)
		var l corev1.ConfigMapList
		if err := c3.List(ctx, &l, client.InNamespace(ns), client.MatchingFields{"data.owner": "team-2"}); err != nil {
			t.Fatal(err)
		}
		if got := names0(l.Items); !slices.Equal(got, w) || len(w) == 0 {
			t.Errorf("data.owner=team-2 in %s after it came back: %v, the API server %v", last, got, w)
		}
		harness.WaitFor(t, "the Provider engages it again", 30*time.Second, func() bool {
			_, err := provider.Get(ctx, last)
			return err == nil
		})
	})
}

// recordingAware records the context of every engagement.
type recordingAware struct {
	mu   sync.Mutex
	ctxs map[string]context.Context
}

func (a *recordingAware) Engage(ctx context.Context, name string, _ cluster.Cluster) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ctxs[name] = ctx
	return nil
}
