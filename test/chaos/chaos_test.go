package chaos

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/test/fleet"
)

var all = []string{"fleet-1", "fleet-2", "fleet-3"}

// churn writes in the background until the returned stop is called.
func churn(ctx context.Context, e *env, rate float64) func() fleet.ChurnResult {
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan fleet.ChurnResult, 1)
	go func() {
		res, _ := e.loader.Churn(cctx, fleet.ChurnSpec{Rate: rate, Duration: time.Hour, Namespace: "chaos"})
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
		if probs := e.seen.problems(); len(probs) > 0 {
			t.Errorf("handler saw inconsistent events: %v", probs[:min(5, len(probs))])
		}
		e.record(row{"etcd compacted while the watch was down (410 on resume)", "relist; handlers get deletes and updates for the gap, no duplicate adds",
			took, diverged, fmt.Sprintf("watch restarts %d → %d; handler inconsistencies %d", before, restarts(e, "fleet-1", "configmaps"), len(e.seen.problems()))})
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
		time.Sleep(3 * time.Second)
		p.Drop()
		p.Resume()
		took, diverged := e.converge(ctx, 90*time.Second, all...)
		e.record(row{"connection stalled 3 s through the proxy, then dropped", "queries keep answering from cache; the dropped watch reconnects and catches up",
			took, diverged, fmt.Sprintf("query on the stalled cluster %s", q.Round(time.Microsecond))})
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
		if probs := e.seen.problems(); len(probs) > 0 {
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
		cms, _ := e.reg.Aggregate("configmaps")
		idx, _ := cms.Cluster("limited")
		same, _ := cms.Cluster("fleet-2")
		diverged := len(idx.ListKeys()) - len(same.ListKeys())
		if diverged < 0 {
			diverged = -diverged
		}
		delete(e.extra, "limited")
		e.writeKubeconfig()
		e.record(row{"RBAC denies configmaps (403) to one identity, then allows them", "that resource Failed \"forbidden (403)\", its other resources synced; recovers by itself",
			took, diverged, fmt.Sprintf("403 reported after %s; diverged = |limited view − fleet-2 view| of configmaps once allowed", detect.Round(time.Millisecond))})
	})

	t.Run("5 CRD deleted and re-created while watched", func(t *testing.T) {
		e.t = t
		if err := e.loader.DeleteCRD(ctx, "fleet-1"); err != nil {
			t.Fatal(err)
		}
		widgets, _ := e.reg.Aggregate("widgets")
		waitFor(t, "widgets gone from fleet-1", 60*time.Second, func() bool {
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
		waitFor(t, "widgets back in fleet-1", 90*time.Second, func() bool {
			idx, ok := widgets.Cluster("fleet-1")
			return ok && len(idx.ListKeys()) == 7
		})
		e.record(row{"Widget CRD deleted in fleet-1, then re-created with new objects", "objects leave as deletes; the resource comes back by itself",
			time.Since(t0), 0, "diverged: fleet-1 widgets equal the 7 re-created ones"})
	})

	t.Run("6 cluster removed by kubeconfig edit frees its goroutines", func(t *testing.T) {
		e.t = t
		before := runtime.NumGoroutine()
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		heapBefore := ms.HeapAlloc
		e.writeKubeconfigOnly([]string{"fleet-1", "fleet-2"})
		waitFor(t, "fleet-3 left", 30*time.Second, func() bool { return len(e.reg.Clusters()) == 2 })
		e.proxies["fleet-3"].Drop() // connections of the stopped informers close with them
		time.Sleep(2 * time.Second)
		runtime.GC()
		runtime.ReadMemStats(&ms)
		after := runtime.NumGoroutine()
		e.record(row{"cluster removed from the kubeconfig", "its stacks stop, goroutines exit, memory is released, handlers get deletes",
			0, len(e.seen.forClusters([]string{"fleet-3"})), fmt.Sprintf("goroutines %d → %d; heap %.1f → %.1f MiB; diverged = fleet-3 objects the handler still holds", before, after, float64(heapBefore)/(1<<20), float64(ms.HeapAlloc)/(1<<20))})
		if after >= before {
			t.Errorf("goroutines %d → %d after removing a cluster", before, after)
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

func waitFor(t *testing.T, what string, within time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s", what, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
