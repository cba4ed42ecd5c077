package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/test/harness"
)

// eventReasons are what a churning cluster's kubelets, schedulers and controllers report.
var eventReasons = []struct{ component, typ, reason, message string }{
	{"default-scheduler", "Normal", "Scheduled", "Successfully assigned %s/%s to node-%d"},
	{"kubelet", "Normal", "Pulling", `Pulling image "registry.example/app:%[3]d"`},
	{"kubelet", "Normal", "Pulled", `Successfully pulled image "registry.example/app:%[3]d" in 1.2s (1.2s including waiting). Image size: 52428800 bytes.`},
	{"kubelet", "Normal", "Created", "Created container: app"},
	{"kubelet", "Normal", "Started", "Started container app"},
	{"kubelet", "Warning", "BackOff", "Back-off restarting failed container app in pod %[2]s_%[1]s(uid-%[2]s)"},
	{"replicaset-controller", "Normal", "SuccessfulCreate", "Created pod: %[2]s"},
	{"kubelet", "Normal", "Killing", "Stopping container app"},
}

// seedEvents writes n Events into a cluster through its API, as a churning cluster's
// components write them: a few reasons and sources, messages naming their Pods.
func seedEvents(ctx context.Context, cs kubernetes.Interface, cluster string, n int) error {
	for i := range 4 {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "load-" + strconv.Itoa(i)}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("cluster %q: create namespace: %w", cluster, err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				r := eventReasons[i%len(eventReasons)]
				ns, pod, node := "load-"+strconv.Itoa(i%4), "app-"+strconv.Itoa(i/len(eventReasons)), i%50
				ts := metav1.NewTime(time.Now().Truncate(time.Second))
				ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: pod + "." + strconv.Itoa(i), Namespace: ns},
					InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod, APIVersion: "v1", UID: types.UID("uid-" + pod), FieldPath: "spec.containers{app}"},
					Reason:         r.reason, Message: fmt.Sprintf(r.message, ns, pod, node), Type: r.typ,
					Source:         corev1.EventSource{Component: r.component, Host: "node-" + strconv.Itoa(node)},
					FirstTimestamp: ts, LastTimestamp: ts, Count: 1, ReportingController: r.component, ReportingInstance: "node-" + strconv.Itoa(node)}
				if _, err := cs.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- fmt.Errorf("cluster %q: create event: %w", cluster, err):
					default:
					}
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// eventsBaseline caches Events as users do today: an informer factory per cluster.
func eventsBaseline(ctx context.Context, cfgs []*rest.Config) (result, func(), error) {
	before := heap()
	stop := make(chan struct{})
	var synced []cache.InformerSynced
	var stores []cache.Store
	for _, cfg := range cfgs {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return result{}, nil, err
		}
		f := informers.NewSharedInformerFactory(cs, 0)
		inf := f.Core().V1().Events().Informer()
		synced, stores = append(synced, inf.HasSynced), append(stores, inf.GetStore())
		f.Start(stop)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		close(stop)
		return result{}, nil, fmt.Errorf("baseline did not sync")
	}
	r := result{bytes: heap() - before}
	runtime.KeepAlive(stores)
	return r, func() { close(stop) }, nil
}

// eventsMulticache caches Events in a Registry, with transform.
func eventsMulticache(transform clusterset.TransformOptions) func(ctx context.Context, cfgs []*rest.Config) (result, func(), error) {
	return func(ctx context.Context, cfgs []*rest.Config) (result, func(), error) {
		before := heap()
		var src clusterset.Static
		for i, cfg := range cfgs {
			src = append(src, clusterset.ClusterConfig{Name: "fleet-" + strconv.Itoa(i+1), Config: cfg, Fingerprint: "x"})
		}
		reg, err := clusterset.New(clusterset.Options{Source: src, QPS: -1, Resources: []clusterset.ResourceSpec{{Name: "events", Transform: transform}}})
		if err != nil {
			return result{}, nil, err
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = reg.Start(rctx); close(done) }()
		if missing := reg.WaitForSync(ctx, 10*time.Minute); missing != nil {
			cancel()
			return result{}, nil, fmt.Errorf("unsynced: %v", missing)
		}
		r := result{bytes: heap() - before}
		runtime.KeepAlive(reg)
		return r, func() { cancel(); <-done }, nil
	}
}

// BenchmarkEventsHeap measures what caching core/v1 Events costs: the heap per Event of B (an
// informer factory per cluster) and of multicache, default and without its transform, on 3
// clusters of MULTICACHE_BENCH_EVENTS Events each (default 5,000), written through the API
// as a churning cluster's components write them. MULTICACHE_BENCH_RUNS runs (default 5) in
// rotating order; medians with (min–max).
//
//	go test -run '^$' -bench EventsHeap -benchtime 1x -timeout 30m -v ./test/bench/
func BenchmarkEventsHeap(b *testing.B) {
	perCluster := harness.EnvInt("MULTICACHE_BENCH_EVENTS", 5000)
	runs := harness.EnvInt("MULTICACHE_BENCH_RUNS", 5)
	h := harness.Start(b, harness.Options{Timeout: time.Hour})
	ctx, f := h.Ctx, h.Fleet
	var cfgs []*rest.Config
	total := 0
	for _, c := range f.Clusters {
		cs, err := kubernetes.NewForConfig(c.AdminConfig())
		if err != nil {
			b.Fatal(err)
		}
		if err := seedEvents(ctx, cs, c.Name, perCluster); err != nil {
			b.Fatal(err)
		}
		evs, err := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		total += len(evs.Items)
		cfg := c.Config()
		cfg.QPS, cfg.Burst = -1, 0
		cfgs = append(cfgs, cfg)
	}
	variants := []variant{
		{"B: informer factory per cluster", eventsBaseline},
		{"multicache default (managedFields dropped, strings shared)", eventsMulticache(clusterset.TransformOptions{})},
		{"multicache, no transform", eventsMulticache(clusterset.TransformOptions{KeepManagedFields: true, KeepLastApplied: true, KeepDuplicates: true})},
	}
	perEvent := map[string][]float64{}
	rotate(b, ctx, cfgs, variants, runs, func(run int, v variant, r result) {
		perEvent[v.name] = append(perEvent[v.name], float64(r.bytes)/float64(total))
		b.Logf("run %d %-60s heap %6.0f B/event", run+1, v.name, float64(r.bytes)/float64(total))
	})
	base := median(perEvent[variants[0].name])
	var sb strings.Builder
	fmt.Fprintf(&sb, "| variant | heap per Event, median (min–max) | ÷ B |\n|---|---|---|\n")
	for _, v := range variants {
		fmt.Fprintf(&sb, "| %s | %s | %.2f× |\n", v.name, spreadBytes(perEvent[v.name]), median(perEvent[v.name])/base)
	}
	b.ReportMetric(median(perEvent[variants[1].name]), "default-B/event")
	b.Log("\n" + sb.String())
	if os.Getenv("MULTICACHE_BENCH_WRITE") != "" {
		writeSection(b, "E1: what caching Events costs", fmt.Sprintf(`%s

%d Events in %d clusters (core/v1), written through the API as a churning cluster's
scheduler, kubelets and ReplicaSet controller write them: 8 reasons, messages naming their Pods,
one source host of 50. Heap per Event: the live heap after GC that the cache adds, divided by
the Events it holds. %d runs in rotating order.

%s`, machineLine(), total, len(cfgs), runs, sb.String()))
	}
}

// spreadBytes is "median B (min–max)".
func spreadBytes(xs []float64) string {
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return fmt.Sprintf("%.0f B (%.0f–%.0f)", median(xs), lo, hi)
}
