package chaos

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/verify"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

var all = []string{"fleet-1", "fleet-2", "fleet-3"}

var churns atomic.Int64

// churn writes in the background until the returned stop is called. Each churn names its
// objects apart from earlier ones'.
func churn(ctx context.Context, e *env, rate float64) func() fleet.ChurnResult {
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan fleet.ChurnResult, 1)
	prefix := fmt.Sprintf("c%d-w", churns.Add(1))
	go func() {
		res, _ := e.loader.Churn(cctx, fleet.ChurnSpec{Rate: rate, Duration: time.Hour, Namespace: "chaos", Prefix: prefix})
		done <- res
	}()
	return func() fleet.ChurnResult { cancel(); return <-done }
}

// writeSome creates, updates and deletes ConfigMaps directly (not through the proxies).
func writeSome(ctx context.Context, t *testing.T, e *env, cluster, prefix string, n int) {
	t.Helper()
	cs, _ := e.f.Clientset(cluster)
	cms := cs.CoreV1().ConfigMaps("load-0")
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", cluster, err)
		}
	}
	// Change and delete some seeded objects too.
	for i := range n / 2 {
		cm, err := cms.Get(ctx, fmt.Sprintf("cm-%d", i), metav1.GetOptions{})
		if err != nil {
			continue // deleted by an earlier scenario
		}
		cm.Data = map[string]string{"changed": prefix}
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := n / 2; i < n; i++ {
		_ = cms.Delete(ctx, fmt.Sprintf("cm-%d", i), metav1.DeleteOptions{})
	}
}

func TestFaults(t *testing.T) {
	var results []row
	e, ctx := setupEnv(t, &results)
	defer func() {
		var sb strings.Builder
		sb.WriteString("\n| scenario | expected | converged after recovery | diverged | note |\n|---|---|---|---|---|\n")
		for _, r := range results {
			fmt.Fprintf(&sb, "| %s | %s | %s | %d | %s |\n", r.scenario, r.expected, r.converge.Round(10*time.Millisecond), r.diverged, r.note)
		}
		t.Log(sb.String())
	}()

	t.Run("1 API server killed and restarted", func(t *testing.T) {
		e.t = t
		stopChurn := churn(ctx, e, 100)
		c, _ := e.f.Cluster("fleet-2")
		if err := c.KillAPIServer(); err != nil {
			t.Fatal(err)
		}
		detect := e.waitState("outage", 60*time.Second, "fleet-2", "configmaps", clusterset.Degraded, "unreachable")
		pods, _ := e.reg.Aggregate("pods")
		t0 := time.Now()
		res, err := pods.Select(aggregate.Query{Clusters: []string{"fleet-1", "fleet-3"}})
		q := time.Since(t0)
		if err != nil || len(res.Unsynced) != 0 || len(res.Items) != 200 {
			t.Errorf("query over the live clusters: %d items, unsynced %v, %v", len(res.Items), res.Unsynced, err)
		}
		res, _ = pods.Select(aggregate.Query{})
		if !slices.Contains(res.Unsynced, "fleet-2") || len(res.Items) != 300 {
			t.Errorf("query over the fleet: %d items (the dead cluster's last state included), unsynced %v", len(res.Items), res.Unsynced)
		}
		time.Sleep(2 * time.Second) // writes go on in the other clusters
		if err := c.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		recovered := time.Now()
		writeSome(ctx, t, e, "fleet-2", "after-restart", 10)
		cr := stopChurn()
		took, diverged := e.converge(ctx, 90*time.Second, all...)
		_ = recovered
		e.record(row{"API server killed (SIGKILL) and restarted, writes going on", "Degraded \"unreachable\" during the outage; other clusters answer; answers name fleet-2 unsynced; converges",
			took, diverged, fmt.Sprintf("outage detected in %s; query over live clusters %s; churn %d ops, %d errors", detect.Round(time.Millisecond), q.Round(time.Microsecond), cr.Ops(), cr.Errors)})
	})

	t.Run("2 etcd compacted while the watch is down", func(t *testing.T) {
		e.t = t
		p := e.proxies["fleet-1"]
		p.Stall()
		p.Drop()
		writeSome(ctx, t, e, "fleet-1", "gap", 20)
		c, _ := e.f.Cluster("fleet-1")
		if _, err := c.Compact(ctx); err != nil {
			t.Fatal(err)
		}
		// A restarted API server rebuilds its watch cache from the compacted etcd: resuming from
		// the cache's last resourceVersion now gets 410 Gone.
		if err := c.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		if err := c.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		before := restarts(e, "fleet-1", "configmaps")
		p.Resume()
		took, diverged := e.converge(ctx, 90*time.Second, all...)
		if probs := e.seen.Problems(); len(probs) > 0 {
			t.Errorf("handler saw inconsistent events: %v", probs[:min(5, len(probs))])
		}
		e.record(row{"etcd compacted while the watch was down (410 on resume)", "relist; handlers get deletes and updates for the gap, no duplicate adds",
			took, diverged, fmt.Sprintf("watch restarts %d → %d; handler inconsistencies %d", before, restarts(e, "fleet-1", "configmaps"), len(e.seen.Problems()))})
	})

	t.Run("3 connection stalled, then dropped", func(t *testing.T) {
		e.t = t
		p := e.proxies["fleet-3"]
		p.Stall()
		writeSome(ctx, t, e, "fleet-3", "stalled", 10)
		pods, _ := e.reg.Aggregate("pods")
		t0 := time.Now()
		if res, _ := pods.Select(aggregate.Query{Clusters: []string{"fleet-3"}}); len(res.Items) != 100 {
			t.Errorf("stalled cluster answers %d pods from cache", len(res.Items))
		}
		q := time.Since(t0)
		detect := e.waitState("stall", 30*time.Second, "fleet-3", "configmaps", clusterset.Degraded, "unreachable")
		p.Drop()
		p.Resume()
		took, diverged := e.converge(ctx, 90*time.Second, all...)
		e.record(row{"connection stalled 3 s through the proxy, then dropped", "queries keep answering from cache; the dropped watch reconnects and catches up",
			took, diverged, fmt.Sprintf("query on the stalled cluster %s; probe reported unreachable after %s", q.Round(time.Microsecond), detect.Round(time.Millisecond))})
	})

	t.Run("4a credential revoked (401), then rotated", func(t *testing.T) {
		e.t = t
		c, _ := e.f.Cluster("fleet-3")
		if err := c.Revoke(ctx); err != nil {
			t.Fatal(err)
		}
		e.proxies["fleet-3"].Drop() // open watches outlive a revocation; force new requests
		detect := e.waitState("revoked", 60*time.Second, "fleet-3", "pods", clusterset.Degraded, "401")
		for _, other := range []string{"fleet-1", "fleet-2"} {
			if cs, _ := e.reg.ClusterStatus(other); cs.State != clusterset.Synced {
				t.Errorf("%s is %s while fleet-3 is revoked", other, cs.State)
			}
		}
		writeSome(ctx, t, e, "fleet-3", "revoked", 6)
		if err := c.Restore(ctx); err != nil {
			t.Fatal(err)
		}
		e.writeKubeconfig() // the rotated token reaches the watched kubeconfig
		took, diverged := e.converge(ctx, 90*time.Second, all...)
		if probs := e.seen.Problems(); len(probs) > 0 {
			t.Errorf("handler saw inconsistent events: %v", probs[:min(5, len(probs))])
		}
		e.record(row{"credential revoked (401), then a new token in the kubeconfig", "Degraded \"unauthorized (401)\" on that cluster only; the rotation restarts it with no duplicate adds",
			took, diverged, fmt.Sprintf("401 reported %s after the connections dropped", detect.Round(time.Millisecond))})
	})

	t.Run("4b RBAC denies one resource (403), then allows it", func(t *testing.T) {
		e.t = t
		e.extra["limited"] = "fleet-2"
		e.writeKubeconfig()
		detect := e.waitState("forbidden", 60*time.Second, "limited", "configmaps", clusterset.Failed, "403")
		e.waitState("pods still fine", 60*time.Second, "limited", "pods", clusterset.Synced, "")
		cs, _ := e.f.Clientset("fleet-2")
		// An explicit role: the bootstrap "view" role is aggregated by kube-controller-manager,
		// which the fleet does not run.
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "read-configmaps"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "limited-configmaps"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "read-configmaps"},
			Subjects:   []rbacv1.Subject{{Kind: "User", Name: fleet.LimitedUser, APIGroup: "rbac.authorization.k8s.io"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		e.waitState("allowed again", 90*time.Second, "limited", "configmaps", clusterset.Synced, "")
		took := time.Since(t0)
		// Ground truth for the limited identity's view is what fleet-2's API server lists.
		cms, _ := e.reg.Aggregate("configmaps")
		var rep verify.Report
		harness.WaitFor(t, "limited view equals fleet-2's API server", 60*time.Second, func() bool {
			var err error
			rep, err = verify.Compare(ctx, cms, harness.ConfigMaps, "", map[string]*rest.Config{"limited": e.servers("fleet-2")["fleet-2"]})
			return err == nil && len(rep.Diverged) == 0
		})
		diverged := len(rep.Diverged)
		if rep.Objects == 0 {
			t.Fatal("fleet-2 lists no ConfigMaps: the comparison proves nothing")
		}
		delete(e.extra, "limited")
		e.writeKubeconfig()
		e.record(row{"RBAC denies configmaps (403) to one identity, then allows them", "that resource Failed \"forbidden (403)\", its other resources synced; recovers by itself",
			took, diverged, fmt.Sprintf("403 reported after %s; the limited identity's %d ConfigMaps compared with fleet-2's API server", detect.Round(time.Millisecond), rep.Objects)})
	})

	t.Run("5 CRD deleted and re-created while watched", func(t *testing.T) {
		e.t = t
		if err := e.loader.DeleteCRD(ctx, "fleet-1"); err != nil {
			t.Fatal(err)
		}
		widgets, _ := e.reg.Aggregate("widgets")
		harness.WaitFor(t, "widgets gone from fleet-1", 60*time.Second, func() bool {
			idx, ok := widgets.Cluster("fleet-1")
			return !ok || len(idx.ListKeys()) == 0
		})
		if err := e.loader.EnsureCRD(ctx, "fleet-1"); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if _, err := e.loader.Seed(ctx, fleet.Spec{Namespaces: 1, WidgetsPerNamespace: 7, CRDClusters: []string{"fleet-1"}}); err != nil {
			t.Fatal(err)
		}
		var rep verify.Report
		harness.WaitFor(t, "widgets equal the API servers", 90*time.Second, func() bool {
			var err error
			rep, err = verify.Compare(ctx, widgets, harness.Widgets, "", e.servers("fleet-1", "fleet-2"))
			return err == nil && len(rep.Diverged) == 0
		})
		took := time.Since(t0)
		idx, _ := widgets.Cluster("fleet-1")
		if n := len(idx.ListKeys()); n != 7 {
			t.Errorf("fleet-1 holds %d widgets, want the 7 re-created", n)
		}
		e.record(row{"Widget CRD deleted in fleet-1, then re-created with new objects", "objects leave as deletes; the resource comes back by itself",
			took, len(rep.Diverged), fmt.Sprintf("widgets of fleet-1 and fleet-2 compared with their API servers (%d objects)", rep.Objects)})
	})

	t.Run("9 context re-pointed at another API server with lower resourceVersions, then back", func(t *testing.T) {
		e.t = t
		// fleet-2's resourceVersions must be ahead of fleet-3's, so that after the re-point
		// every event of "fleet-2" carries a lower resourceVersion than before.
		gap := bumpRevision(ctx, t, e, "fleet-2", "fleet-3", 2000)
		stopChurn := churn(ctx, e, 100)
		time.Sleep(2 * time.Second) // writes before
		restartsBefore := clusterRestarts(e, "fleet-2")
		e.repoint["fleet-2"] = "fleet-3"
		e.writeKubeconfig()
		harness.WaitFor(t, "fleet-2 restarted on fleet-3's API server", 60*time.Second, func() bool { return clusterRestarts(e, "fleet-2") > restartsBefore })
		time.Sleep(3 * time.Second) // writes during and after the swap
		cr := stopChurn()
		took1, diverged1 := e.converge(ctx, 90*time.Second, all...)
		stopChurn = churn(ctx, e, 100)
		delete(e.repoint, "fleet-2")
		e.writeKubeconfig()
		harness.WaitFor(t, "fleet-2 restarted on its own API server", 60*time.Second, func() bool { return clusterRestarts(e, "fleet-2") > restartsBefore+1 })
		time.Sleep(3 * time.Second)
		cr2 := stopChurn()
		took2, diverged2 := e.converge(ctx, 90*time.Second, all...)
		e.checkConsistent(t)
		e.record(row{"context fleet-2 re-pointed at fleet-3's API server (resourceVersions " + gap + " lower), writes before, during and after; then back", "handlers and the HTTP watch client end equal to whichever API server the context names",
			max(took1, took2), diverged1 + diverged2, fmt.Sprintf("converged %s after the re-point, %s after the return; churn %d and %d ops; %s", took1.Round(10*time.Millisecond), took2.Round(10*time.Millisecond), cr.Ops(), cr2.Ops(), e.watchSummary())})
	})

	t.Run("10 credentials rotated while writes run", func(t *testing.T) {
		e.t = t
		stopChurn := churn(ctx, e, 150)
		time.Sleep(2 * time.Second)
		before := clusterRestarts(e, "fleet-1")
		c, _ := e.f.Cluster("fleet-1")
		if err := c.Restore(ctx); err != nil { // a new token for the same identity
			t.Fatal(err)
		}
		e.writeKubeconfig()
		harness.WaitFor(t, "fleet-1 restarted", 60*time.Second, func() bool { return clusterRestarts(e, "fleet-1") > before })
		time.Sleep(3 * time.Second)
		cr := stopChurn()
		took, diverged := e.converge(ctx, 90*time.Second, all...)
		e.checkConsistent(t)
		e.record(row{"fleet-1's token rotated in the kubeconfig while 150 writes/s run", "the cluster restarts; handlers see only the differences, in a consistent order; all views converge",
			took, diverged, fmt.Sprintf("churn %d ops, %d errors; %s", cr.Ops(), cr.Errors, e.watchSummary())})
	})

	t.Run("11 cluster removed while writes run, then re-added under the same name", func(t *testing.T) {
		e.t = t
		_, expiredFleet, _ := e.watch.counts()
		_, expiredOne, _ := e.watchOne.counts()
		stopChurn := churn(ctx, e, 150)
		time.Sleep(2 * time.Second)
		e.writeKubeconfigOnly([]string{"fleet-2", "fleet-3"})
		harness.WaitFor(t, "fleet-1 left", 30*time.Second, func() bool { return !slices.Contains(e.reg.Clusters(), "fleet-1") })
		harness.WaitFor(t, "fleet-1 gone from every view", 60*time.Second, func() bool {
			return len(e.seen.InClusters("fleet-1"))+len(e.slow.InClusters("fleet-1"))+len(e.watch.InClusters("fleet-1")) == 0
		})
		time.Sleep(2 * time.Second) // fleet-1 is written to while it is out
		e.writeKubeconfig()
		harness.WaitFor(t, "fleet-1 back", 30*time.Second, func() bool { return slices.Contains(e.reg.Clusters(), "fleet-1") })
		if missing := e.reg.WaitForSync(ctx, time.Minute); missing != nil {
			t.Fatalf("after re-adding fleet-1: %v", missing)
		}
		time.Sleep(2 * time.Second)
		cr := stopChurn()
		took, diverged := e.converge(ctx, 90*time.Second, all...)
		e.checkConsistent(t)
		_, expiredFleet2, _ := e.watch.counts()
		_, expiredOne2, _ := e.watchOne.counts()
		if expiredOne2 != expiredOne {
			t.Errorf("the watch of fleet-2 alone got %d 410s while fleet-1 left and joined", expiredOne2-expiredOne)
		}
		if expiredFleet2 != expiredFleet {
			t.Errorf("the fleet-wide watch got %d 410s while fleet-1 (over 5,000 ConfigMaps) left and joined", expiredFleet2-expiredFleet)
		}
		e.record(row{"fleet-1 (5,000+ ConfigMaps) removed while 150 writes/s run, then re-added under the same name", "deletes then adds reach every handler and watch; no healthy watch expires",
			took, diverged, fmt.Sprintf("churn %d ops; watch 410s during the scenario: fleet-wide %d, fleet-2 only %d", cr.Ops(), expiredFleet2-expiredFleet, expiredOne2-expiredOne)})
	})

	t.Run("12 handler added while a cluster is being removed", func(t *testing.T) {
		e.t = t
		stopChurn := churn(ctx, e, 100)
		cms, _ := e.reg.Aggregate("configmaps")
		var late []*harness.FinalStates
		adding := make(chan struct{})
		added := make(chan struct{})
		go func() {
			defer close(added)
			for {
				select {
				case <-adding:
					return
				default:
				}
				h := harness.NewFinalStates(0)
				if _, err := cms.AddEventHandler(h); err != nil {
					t.Errorf("AddEventHandler during a removal: %v", err)
					return
				}
				late = append(late, h)
				time.Sleep(25 * time.Millisecond)
			}
		}()
		time.Sleep(100 * time.Millisecond)
		e.writeKubeconfigOnly([]string{"fleet-1", "fleet-2"})
		harness.WaitFor(t, "fleet-3 left", 30*time.Second, func() bool { return !slices.Contains(e.reg.Clusters(), "fleet-3") })
		time.Sleep(300 * time.Millisecond)
		close(adding)
		<-added
		cr := stopChurn()
		took, diverged := e.converge(ctx, 90*time.Second, "fleet-1", "fleet-2")
		truth, err := verify.Truth(ctx, harness.ConfigMaps, "", e.servers("fleet-1", "fleet-2"))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		for k, v := range truth {
			want[k.String()] = v
		}
		for i, h := range late {
			var d []string
			harness.WaitFor(t, "late handler converged", 60*time.Second, func() bool {
				d = harness.Diff(want, h.InClusters(all...))
				return len(d) == 0
			})
			if p := h.Problems(); len(p) > 0 {
				t.Errorf("handler %d of %d, added during the removal, saw inconsistent events: %v", i+1, len(late), p[:min(5, len(p))])
			}
			diverged += len(d)
		}
		e.writeKubeconfig()
		harness.WaitFor(t, "fleet-3 back", 30*time.Second, func() bool { return slices.Contains(e.reg.Clusters(), "fleet-3") })
		if missing := e.reg.WaitForSync(ctx, time.Minute); missing != nil {
			t.Fatalf("after re-adding fleet-3: %v", missing)
		}
		took2, diverged2 := e.converge(ctx, 90*time.Second, all...)
		e.checkConsistent(t)
		e.record(row{"handlers added every 25 ms while fleet-3 is removed (writes running)", "each added handler gets every remaining object once and none of fleet-3's; all converge",
			max(took, took2), diverged + diverged2, fmt.Sprintf("%d handlers added; churn %d ops", len(late), cr.Ops())})
	})

	t.Run("6 cluster removed by kubeconfig edit frees its goroutines and memory", func(t *testing.T) {
		e.t = t
		// Weak pointers to some of fleet-3's cached objects: once it is removed, nothing may
		// keep them alive.
		cms, _ := e.reg.Aggregate("configmaps")
		idx, _ := cms.Cluster("fleet-3")
		var objs []weak.Pointer[corev1.ConfigMap]
		for _, o := range idx.List()[:20] {
			objs = append(objs, weak.Make(o.(*corev1.ConfigMap)))
		}
		idx = nil
		before := runtime.NumGoroutine()
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		heapBefore := ms.HeapAlloc
		e.writeKubeconfigOnly([]string{"fleet-1", "fleet-2"})
		harness.WaitFor(t, "fleet-3 left", 30*time.Second, func() bool { return len(e.reg.Clusters()) == 2 })
		e.proxies["fleet-3"].Drop() // connections of the stopped informers close with them
		harness.WaitFor(t, "handlers and watch client dropped fleet-3", 30*time.Second, func() bool {
			return len(e.seen.InClusters("fleet-3"))+len(e.slow.InClusters("fleet-3"))+len(e.watch.InClusters("fleet-3")) == 0
		})
		// The watch hub keeps recent events, the deletes among them, for resuming watches: they
		// hold the objects until the ring moves on. This is the last scenario, so the HTTP API
		// is closed first; then nothing else (informers, stores, aggregate, handler queues)
		// may keep any of them.
		e.watch.stop()
		e.watchOne.stop()
		e.srv.Close()
		time.Sleep(2 * time.Second)
		runtime.GC()
		runtime.ReadMemStats(&ms)
		after := runtime.NumGoroutine()
		leftover := len(e.seen.InClusters("fleet-3")) + len(e.slow.InClusters("fleet-3"))
		alive := 0
		for _, w := range objs {
			if w.Value() != nil {
				alive++
			}
		}
		e.record(row{"cluster removed from the kubeconfig", "its stacks stop, goroutines exit, handlers and watches get deletes, its objects are released",
			0, leftover, fmt.Sprintf("goroutines %d → %d; heap %.1f → %.1f MiB; %d of %d sampled objects reachable", before, after, float64(heapBefore)/(1<<20), float64(ms.HeapAlloc)/(1<<20), alive, len(objs))})
		if after >= before {
			t.Errorf("goroutines %d → %d after removing a cluster", before, after)
		}
		if leftover > 0 {
			t.Errorf("handlers still hold %d of fleet-3's objects", leftover)
		}
		if alive > 0 {
			t.Errorf("%d of %d sampled objects of the removed cluster are still reachable", alive, len(objs))
		}
	})
}

func (e *env) writeKubeconfigOnly(keep []string) {
	e.writeKubeconfig()
	cfg, _ := loadKC(e.kc)
	for name := range cfg.Contexts {
		if !slices.Contains(keep, name) {
			delete(cfg.Contexts, name)
		}
	}
	saveKC(e.t, cfg, e.kc)
}

func restarts(e *env, cluster, resource string) int64 {
	cs, _ := e.reg.ClusterStatus(cluster)
	for _, r := range cs.Resources {
		if r.Resource == resource {
			return r.WatchRestarts
		}
	}
	return -1
}

// bumpRevision writes to cluster until its etcd revision is at least by ahead of other's, and
// returns the gap in words.
func bumpRevision(ctx context.Context, t *testing.T, e *env, cluster, other string, by int) string {
	t.Helper()
	rev := func(name string) int {
		cs, _ := e.f.Clientset(name)
		l, err := cs.CoreV1().ConfigMaps("load-0").List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(l.ResourceVersion)
		return n
	}
	cs, _ := e.f.Clientset(cluster)
	cms := cs.CoreV1().ConfigMaps("load-0")
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "revision-bump"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for rev(cluster) < rev(other)+by {
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := range 25 {
					patch := fmt.Sprintf(`{"data":{"w%d":"%d"}}`, w, i)
					if _, err := cms.Patch(ctx, "revision-bump", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	return strconv.Itoa(rev(cluster)-rev(other)) + " or more"
}

func clusterRestarts(e *env, cluster string) int {
	cs, _ := e.reg.ClusterStatus(cluster)
	return cs.Restarts
}

// checkConsistent fails the test if any handler was told an inconsistent story (an add of a
// key it held, an update or delete of one it did not) or the watch clients reported errors.
func (e *env) checkConsistent(t *testing.T) {
	t.Helper()
	for name, h := range map[string]*harness.FinalStates{"fast": e.seen, "slow": e.slow} {
		if p := h.Problems(); len(p) > 0 {
			t.Errorf("%s handler saw inconsistent events: %v", name, p[:min(5, len(p))])
		}
	}
	for name, w := range map[string]*watchClient{"fleet-wide": e.watch, "fleet-2": e.watchOne} {
		if _, _, errs := w.counts(); len(errs) > 0 {
			t.Errorf("%s watch client: %v", name, errs[:min(5, len(errs))])
		}
	}
}

func (e *env) watchSummary() string {
	l, x, _ := e.watch.counts()
	l1, x1, _ := e.watchOne.counts()
	return fmt.Sprintf("watch clients so far: fleet-wide %d lists, %d 410s; fleet-2 %d lists, %d 410s", l, x, l1, x1)
}
