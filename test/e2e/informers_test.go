package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

const informerConfig = `
kubeconfig:
  paths: [%q]
  include: ["fleet-*"]
resources:
  - name: pods
  - name: widgets
server:
  bookmarkInterval: 1s
`

// eventCounts counts an informer's events per cluster (the annotation says which).
type eventCounts struct {
	mu                    sync.Mutex
	adds, updates, delete map[string]int
}

func newEventCounts() *eventCounts {
	return &eventCounts{adds: map[string]int{}, updates: map[string]int{}, delete: map[string]int{}}
}

func clusterOf(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "?"
	}
	return m.GetAnnotations()[api.ClusterAnnotation]
}

func (e *eventCounts) handler() cache.ResourceEventHandlerFuncs {
	count := func(m map[string]int, obj any) {
		e.mu.Lock()
		m[clusterOf(obj)]++
		e.mu.Unlock()
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { count(e.adds, obj) },
		UpdateFunc: func(_, obj any) { count(e.updates, obj) },
		DeleteFunc: func(obj any) { count(e.delete, obj) },
	}
}

// storeState is cluster|namespace/name → resourceVersion in its cluster of what an informer
// holds (the object's own resourceVersion is the daemon's).
func storeState(store cache.Store) map[string]string {
	out := map[string]string{}
	for _, obj := range store.List() {
		m, _ := meta.Accessor(obj)
		out[clusterOf(obj)+"|"+m.GetNamespace()+"/"+m.GetName()] = m.GetAnnotations()[api.ResourceVersionAnnotation]
	}
	return out
}

// TestInformersThroughDaemon: a typed SharedInformerFactory and a dynamic informer factory,
// pointed at the daemon as at an API server, sync the fleet, receive adds, updates and deletes
// from every cluster while writes run, survive the daemon's restart by relisting, and end
// equal to what the API servers list. Run by make test with client-go's watch-list
// consistency detector on: after every watch-list it lists at the bookmark's resourceVersion
// (resourceVersionMatch=Exact) and panics on a difference.
func TestInformersThroughDaemon(t *testing.T) {
	env := harness.Start(t, harness.Options{Timeout: 10 * time.Minute, Seed: fleet.Spec{Namespaces: 1, Nodes: 1, PodsPerNamespace: 5,
		WidgetsPerNamespace: 2, CRDClusters: []string{"fleet-1", "fleet-2"}}})
	ctx, f := env.Ctx, env.Fleet
	cfgPath := filepath.Join(t.TempDir(), "multicache.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(informerConfig, f.Kubeconfig())), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := harness.FreePort(t)
	d := harness.StartDaemonAt(t, "http", http.DefaultClient, addr, "--config", cfgPath)

	// Names are unique across clusters: an informer keys objects by namespace/name.
	selected := func(o *metav1.ListOptions) { o.LabelSelector = "e2e=informer" }
	cfg := &rest.Config{Host: d.URL}
	pods := newEventCounts()
	factory := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(cfg), 0, informers.WithTweakListOptions(selected))
	podInformer := factory.Core().V1().Pods().Informer()
	if _, err := podInformer.AddEventHandler(pods.handler()); err != nil {
		t.Fatal(err)
	}
	widgets := newEventCounts()
	dynFactory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dynamic.NewForConfigOrDie(cfg), 0, "", selected)
	widgetInformer := dynFactory.ForResource(fleet.WidgetGVR).Informer()
	if _, err := widgetInformer.AddEventHandler(widgets.handler()); err != nil {
		t.Fatal(err)
	}

	// Writers: in every cluster, create Pods (and Widgets where served), update and delete
	// some of them, until stopped.
	wctx, stopWrites := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var writes, failures atomic.Int64
	for _, c := range f.Names() {
		cs, _ := f.Clientset(c)
		cl, _ := f.Cluster(c)
		dyn := dynamic.NewForConfigOrDie(cl.AdminConfig())
		withWidgets := c != "fleet-3"
		wg.Go(func() {
			for i := 0; wctx.Err() == nil; i++ {
				name := fmt.Sprintf("inf-%s-%d", c, i)
				_, err := cs.CoreV1().Pods("load-0").Create(wctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"e2e": "informer"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, metav1.CreateOptions{})
				note := func(err error) {
					if err != nil && wctx.Err() == nil {
						failures.Add(1)
					}
					writes.Add(1)
				}
				note(err)
				if i%3 == 2 {
					p, err := cs.CoreV1().Pods("load-0").Get(wctx, fmt.Sprintf("inf-%s-%d", c, i-1), metav1.GetOptions{})
					if err == nil {
						p.Labels["step"] = fmt.Sprint(i)
						_, err = cs.CoreV1().Pods("load-0").Update(wctx, p, metav1.UpdateOptions{})
					}
					note(err)
				}
				if i%5 == 4 {
					note(cs.CoreV1().Pods("load-0").Delete(wctx, fmt.Sprintf("inf-%s-%d", c, i-4), metav1.DeleteOptions{}))
				}
				if withWidgets && i%2 == 0 {
					u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.multicache.io/v1", "kind": "Widget",
						"metadata": map[string]any{"name": fmt.Sprintf("w-%s-%d", c, i), "labels": map[string]any{"e2e": "informer"}},
						"spec":     map[string]any{"size": int64(i)}}}
					_, err := dyn.Resource(fleet.WidgetGVR).Namespace("load-0").Create(wctx, u, metav1.CreateOptions{})
					note(err)
					if i%4 == 2 {
						note(dyn.Resource(fleet.WidgetGVR).Namespace("load-0").Delete(wctx, fmt.Sprintf("w-%s-%d", c, i-2), metav1.DeleteOptions{}))
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	defer func() { stopWrites(); wg.Wait() }()

	factory.Start(ctx.Done())
	dynFactory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v: not synced", typ)
		}
	}
	for gvr, ok := range dynFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v: not synced", gvr)
		}
	}
	time.Sleep(4 * time.Second)
	t.Log("restarting the daemon, writes running")
	if err := d.Stop(t); err != nil {
		t.Logf("daemon stop: %v", err)
	}
	time.Sleep(time.Second)
	harness.StartDaemonAt(t, "http", http.DefaultClient, addr, "--config", cfgPath)
	time.Sleep(4 * time.Second)
	stopWrites()
	wg.Wait()
	t.Logf("%d writes (%d failed)", writes.Load(), failures.Load())
	if failures.Load() > 0 {
		t.Errorf("%d writes failed", failures.Load())
	}

	truth := func(widgetsToo bool) map[string]string {
		out := map[string]string{}
		for _, c := range f.Names() {
			if !widgetsToo {
				cs, _ := f.Clientset(c)
				list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "e2e=informer"})
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range list.Items {
					out[c+"|"+p.Namespace+"/"+p.Name] = p.ResourceVersion
				}
				continue
			}
			if c == "fleet-3" {
				continue
			}
			cl, _ := f.Cluster(c)
			list, err := dynamic.NewForConfigOrDie(cl.AdminConfig()).Resource(fleet.WidgetGVR).List(ctx, metav1.ListOptions{LabelSelector: "e2e=informer"})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range list.Items {
				out[c+"|"+w.GetNamespace()+"/"+w.GetName()] = w.GetResourceVersion()
			}
		}
		return out
	}
	for _, tc := range []struct {
		what    string
		store   cache.Store
		counts  *eventCounts
		widgets bool
	}{{"typed Pod informer", podInformer.GetStore(), pods, false}, {"dynamic Widget informer", widgetInformer.GetStore(), widgets, true}} {
		want := truth(tc.widgets)
		var diff []string
		ok := waitUntil(60*time.Second, func() bool {
			diff = harness.Diff(want, storeState(tc.store))
			return len(diff) == 0
		})
		if !ok {
			sort.Strings(diff)
			t.Errorf("%s: differs from the API servers in %d keys, e.g. %s", tc.what, len(diff), strings.Join(diff[:min(5, len(diff))], "; "))
		}
		tc.counts.mu.Lock()
		for _, c := range f.Names() {
			if tc.widgets && c == "fleet-3" {
				continue
			}
			if tc.counts.adds[c] == 0 || tc.counts.delete[c] == 0 || (!tc.widgets && tc.counts.updates[c] == 0) {
				t.Errorf("%s: cluster %s: %d adds, %d updates, %d deletes: want all three (deletes only for widgets)", tc.what, c, tc.counts.adds[c], tc.counts.updates[c], tc.counts.delete[c])
			}
		}
		t.Logf("%s: %d objects, adds %v, updates %v, deletes %v", tc.what, len(want), tc.counts.adds, tc.counts.updates, tc.counts.delete)
		tc.counts.mu.Unlock()
	}
}

func waitUntil(within time.Duration, f func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if f() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}
