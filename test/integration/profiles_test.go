package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	mcrcache "github.com/multicache/multicache/pkg/crcache"
	"github.com/multicache/multicache/pkg/sources"
	"github.com/multicache/multicache/pkg/verify"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// deleteCounter counts the deletes handlers are told of, per key, on top of FinalStates.
type deleteCounter struct {
	*harness.FinalStates
	mu      sync.Mutex
	deletes map[string]int
}

func (d *deleteCounter) OnDelete(cluster string, obj any) {
	d.mu.Lock()
	d.deletes[harness.KeyOf(cluster, obj)]++
	d.mu.Unlock()
	d.FinalStates.OnDelete(cluster, obj)
}

// TestClusterProfiles runs a fleet from a ClusterProfile inventory in fleet-1 (the management
// cluster): members fleet-2 and fleet-3 are reached through an exec plugin that hands out a
// token their API servers accept. Profiles join once healthy, stay (cached) when unhealthy,
// restart alone when their server or CA changes, leave when deleted; a provider the file does
// not name and a failing plugin fail their cluster only; the controller-runtime Provider
// engages the clusters. ConfigMaps are written in the members throughout.
func TestClusterProfiles(t *testing.T) {
	env := harness.Start(t, harness.Options{Timeout: 8 * time.Minute})
	ctx, f := env.Ctx, env.Fleet
	mgmt, _ := f.Cluster("fleet-1")
	c2, _ := f.Cluster("fleet-2")
	c3, _ := f.Cluster("fleet-3")
	inv := harness.InstallInventory(ctx, t, mgmt.AdminConfig())
	dc := dynamic.NewForConfigOrDie(mgmt.AdminConfig())

	plugin := fleet.BuildExecPluginT(t)
	pluginLog := filepath.Join(t.TempDir(), "plugin.log")
	providers := harness.WriteProviderFile(t, plugin, f.Dir, pluginLog)

	// Writes in both members from the start to the end: creates, then updates.
	const ns = "profiles-load"
	for _, c := range []*fleet.Cluster{c2, c3} {
		cs := kubernetesFor(t, c.AdminConfig())
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	writeCtx, stopWrites := context.WithCancel(ctx)
	var writes atomic.Int64
	var writers sync.WaitGroup
	for _, c := range []*fleet.Cluster{c2, c3} {
		writers.Add(1)
		go func() {
			defer writers.Done()
			cs := kubernetesFor(t, c.AdminConfig())
			for i := 0; writeCtx.Err() == nil; i++ {
				name := fmt.Sprintf("cm-%d", i%40)
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"n": fmt.Sprint(i)}}
				var err error
				if i < 40 {
					_, err = cs.CoreV1().ConfigMaps(ns).Create(writeCtx, cm, metav1.CreateOptions{})
				} else {
					_, err = cs.CoreV1().ConfigMaps(ns).Update(writeCtx, cm, metav1.UpdateOptions{})
				}
				if err == nil {
					writes.Add(1)
				}
				time.Sleep(25 * time.Millisecond)
			}
		}()
	}
	defer func() { stopWrites(); writers.Wait() }()
	// flowing returns once writes land after it is called: each move below starts while the
	// writers are writing, however fast the steps before it went.
	flowing := func(move string) {
		t.Helper()
		w := writes.Load()
		harness.WaitFor(t, "writes flowing before "+move, 30*time.Second, func() bool { return writes.Load() >= w+3 })
	}

	// Before the source starts: m2b (fleet-2, under another name) is unhealthy; unknown offers a
	// provider the file does not name; failing's plugin fails.
	inv.Set("m2b", "False", harness.AccessTo(t, c2, "fleet-tokens"))
	inv.Set("unknown", "True", harness.AccessTo(t, c3, "nobody"))
	inv.Set("failing", "True", harness.AccessTo(t, c3, "broken"))

	src, err := sources.NewClusterProfiles(sources.ClusterProfilesOptions{Client: dc, Namespace: harness.InventoryNamespace,
		LabelSelector: "x-k8s.io/cluster-manager=test", ProviderFile: providers, Logger: zaptest.NewLogger(t).Named("profiles")})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if err := src.Start(runCtx, time.Minute); err != nil {
		t.Fatal(err)
	}
	reg, err := clusterset.New(clusterset.Options{Source: src, Logger: zaptest.NewLogger(t), Resources: []clusterset.ResourceSpec{{Name: "configmaps"}}})
	if err != nil {
		t.Fatal(err)
	}
	agg, _ := reg.Aggregate("configmaps")
	handler := &deleteCounter{FinalStates: harness.NewFinalStates(0), deletes: map[string]int{}}
	if _, err := agg.AddEventHandler(handler); err != nil {
		t.Fatal(err)
	}
	fl, err := mcrcache.NewFleet(reg, mcrcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fleetDone := make(chan struct{})
	go func() { _ = fl.Start(runCtx); close(fleetDone) }()
	defer func() { stop(); <-fleetDone }()
	aware := &recordingAware{ctxs: map[string]context.Context{}}
	provider := fl.Provider(mcrcache.ProviderOptions{Resync: 200 * time.Millisecond})
	go func() { _ = provider.Start(runCtx, aware) }()

	status := func(name string) clusterset.ClusterStatus {
		cs, _ := reg.ClusterStatus(name)
		return cs
	}
	// m2b was in the inventory when the source started: it is taken as joined, and served
	// though unhealthy (a restart keeps serving such a cluster), Degraded until it is healthy.
	harness.WaitFor(t, "m2b synced but Degraded, unknown and failing failed", time.Minute, func() bool {
		m := status("m2b")
		return m.State == clusterset.Degraded && len(m.Resources) == 1 && m.Resources[0].State == clusterset.Synced &&
			status("unknown").State == clusterset.Failed && status("failing").State == clusterset.Failed
	})
	if e := status("m2b").Error; !strings.Contains(e, "ControlPlaneHealthy is False") {
		t.Errorf("m2b's error %q: want its condition", e)
	}
	inv.Set("m2b", "True", harness.AccessTo(t, c2, "fleet-tokens"))
	harness.WaitFor(t, "m2b Synced once healthy", 30*time.Second, func() bool { return status("m2b").State == clusterset.Synced })
	if r := status("m2b").Restarts; r != 0 {
		t.Errorf("m2b restarted %d times when its health changed", r)
	}

	// m2 and m3 appear unhealthy while the source runs: they are in the fleet, and wait.
	inv.Set("m2", "False", harness.AccessTo(t, c2, "fleet-tokens"))
	inv.Set("m3", "False", harness.AccessTo(t, c3, "fleet-tokens"))
	harness.WaitFor(t, "m2 and m3 in the fleet", 30*time.Second, func() bool {
		return slices.Equal(reg.Clusters(), []string{"failing", "m2", "m2b", "m3", "unknown"})
	})
	// m2 and m3 have not been healthy: they wait, list nothing, and the Provider leaves them.
	harness.WaitFor(t, "m2 and m3 waiting", 30*time.Second, func() bool {
		return status("m2").Resources[0].State == clusterset.NotServed && status("m3").Resources[0].State == clusterset.NotServed
	})
	time.Sleep(500 * time.Millisecond) // a Provider sync or two: it must not engage them
	for _, name := range []string{"m2", "m3"} {
		s := status(name)
		if !s.Waiting || s.State != clusterset.Pending || !strings.Contains(s.Error, "waiting for its control plane to be healthy") || s.Resources[0].State != clusterset.NotServed {
			t.Fatalf("%s, unhealthy since it appeared: %+v", name, s)
		}
		if n, _ := agg.Len(name); n != 0 {
			t.Fatalf("%s, waiting, holds %d objects", name, n)
		}
		if _, err := provider.Get(ctx, name); err == nil {
			t.Fatalf("the Provider engaged %s, which waits", name)
		}
	}
	if e := status("unknown").Error; !strings.Contains(e, `"nobody"`) || !strings.Contains(e, "provider file") {
		t.Errorf("unknown's error %q: want the provider's name and the provider file", e)
	}
	if e := status("failing").Error; !strings.Contains(e, "credentials: exec: executable "+plugin+" failed with exit code 1") {
		t.Errorf("failing's error %q: want the plugin's failure", e)
	}

	// Healthy: they join and sync, and the Provider engages them.
	flowing("m2 and m3 join")
	inv.Set("m2", "True", harness.AccessTo(t, c2, "fleet-tokens"))
	inv.Set("m3", "True", harness.AccessTo(t, c3, "fleet-tokens"))
	members := func(names ...string) map[string]*rest.Config {
		out := map[string]*rest.Config{}
		for _, n := range names {
			c, _ := f.Cluster(map[string]string{"m2": "fleet-2", "m2b": "fleet-2", "m3": "fleet-3"}[n])
			out[n] = c.AdminConfig()
		}
		return out
	}
	harness.WaitFor(t, "m2 and m3 synced", time.Minute, func() bool {
		return status("m2").State == clusterset.Synced && status("m3").State == clusterset.Synced
	})
	harness.Converge(ctx, t, agg, harness.ConfigMaps, members("m2", "m2b", "m3"), 30*time.Second)
	harness.WaitFor(t, "the Provider engages m2 and m3", 30*time.Second, func() bool {
		_, e2 := provider.Get(ctx, "m2")
		_, e3 := provider.Get(ctx, "m3")
		return e2 == nil && e3 == nil
	})
	if b, err := os.ReadFile(pluginLog); err != nil || !strings.Contains(string(b), "cluster=fleet-2 server="+c2.URL()) || !strings.Contains(string(b), "cluster=fleet-3 server="+c3.URL()) {
		t.Errorf("the plugin's log does not show the profiles' clusters and servers reaching it (%v):\n%s", err, b)
	}

	// m3 unhealthy: Degraded with the condition in its error, its cache kept and not restarted.
	count := func(cluster string) int { n, _ := agg.Len(cluster); return n }
	flowing("m3 turns unhealthy")
	before := count("m3")
	inv.Set("m3", "False", harness.AccessTo(t, c3, "fleet-tokens"))
	harness.WaitFor(t, "m3 Degraded", 30*time.Second, func() bool { return status("m3").State == clusterset.Degraded })
	if s := status("m3"); !strings.Contains(s.Error, "ControlPlaneHealthy is False") || s.Restarts != 0 || count("m3") < before || !reg.Running("m3") {
		t.Fatalf("m3 unhealthy: error %q, restarts %d, %d objects (had %d)", s.Error, s.Restarts, count("m3"), before)
	}
	harness.Converge(ctx, t, agg, harness.ConfigMaps, members("m3"), 30*time.Second)
	inv.Set("m3", "True", harness.AccessTo(t, c3, "fleet-tokens"))
	harness.WaitFor(t, "m3 Synced again", 30*time.Second, func() bool { return status("m3").State == clusterset.Synced })

	// m2's CA and m2b's server change (the same API servers, reached another way): each
	// restarts, alone.
	flowing("m2 and m2b restart")
	a2 := harness.AccessTo(t, c2, "fleet-tokens")
	a2.CA = append(append([]byte{}, a2.CA...), a2.CA...) // the CA twice: another bundle, the same trust
	inv.Set("m2", "True", a2)
	a2b := harness.AccessTo(t, c2, "fleet-tokens")
	a2b.Server = strings.Replace(a2b.Server, "127.0.0.1", "localhost", 1)
	inv.Set("m2b", "True", a2b)
	harness.WaitFor(t, "m2 and m2b restarted and synced", time.Minute, func() bool {
		return status("m2").Restarts == 1 && status("m2b").Restarts == 1 && status("m2").State == clusterset.Synced && status("m2b").State == clusterset.Synced
	})
	if r := status("m3").Restarts; r != 0 {
		t.Errorf("m3 restarted %d times: only m2 and m2b changed", r)
	}
	harness.Converge(ctx, t, agg, harness.ConfigMaps, members("m2", "m2b", "m3"), 30*time.Second)

	// m3 deleted: it leaves, handlers see its deletes, and the Provider disengages it. m2b
	// leaves the label selector: it leaves too.
	flowing("m3 and m2b leave")
	m3Keys := harness.InClusters(handler.InClusters(), "m3")
	m2bKeys := harness.InClusters(handler.InClusters(), "m2b")
	inv.Delete("m3")
	u, err := inv.Client.Get(ctx, "m2b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.SetLabels(map[string]string{"x-k8s.io/cluster-manager": "another"})
	if _, err := inv.Client.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, "m3 and m2b left", 30*time.Second, func() bool {
		return !reg.Running("m3") && len(handler.InClusters("m3")) == 0 && !reg.Running("m2b") && len(handler.InClusters("m2b")) == 0
	})
	harness.WaitFor(t, "the Provider disengages m3", 30*time.Second, func() bool {
		_, err := provider.Get(ctx, "m3")
		return err != nil
	})

	// The writes stop; the final state of the cache and of the handler is what the members list.
	flowing("the writes stop")
	harness.WaitFor(t, "100 writes in all", time.Minute, func() bool { return writes.Load() >= 100 })
	stopWrites()
	writers.Wait()
	final := members("m2")
	harness.Converge(ctx, t, agg, harness.ConfigMaps, final, 30*time.Second)
	truth := groundTruthOf(ctx, t, final)
	harness.WaitFor(t, "the handler's final state is the members'", 30*time.Second, func() bool {
		return len(diff(truth, handler.InClusters())) == 0
	})
	if p := handler.Problems(); len(p) > 0 {
		t.Errorf("handler inconsistencies: %v", p)
	}
	// No object was ever deleted on a server: every delete a handler saw is one of the objects
	// of m3 or m2b, which left.
	handler.mu.Lock()
	for k, n := range handler.deletes {
		if !strings.HasPrefix(k, "m3"+aggregate.Separator) && !strings.HasPrefix(k, "m2b"+aggregate.Separator) {
			t.Errorf("handler told %d× of the deletion of %s, which was never deleted", n, k)
		}
	}
	handler.mu.Unlock()
	t.Logf("%d writes; %d deletes told, all of the %d objects of m3 and m2b", writes.Load(), len(handler.deletes), len(m3Keys)+len(m2bKeys))
}

// groundTruthOf is what the named API servers list of ConfigMaps.
func groundTruthOf(ctx context.Context, t *testing.T, servers map[string]*rest.Config) truth {
	t.Helper()
	tr, err := verify.Truth(ctx, harness.ConfigMaps, "", servers)
	if err != nil {
		t.Fatal(err)
	}
	return harness.Truth(tr)
}

func kubernetesFor(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

var _ aggregate.Handler = (*deleteCounter)(nil)
