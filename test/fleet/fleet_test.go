package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/multicache/multicache/test/fleet"
)

// TestLocalFleet runs one 3-cluster fleet through everything the fleet promises.
func TestLocalFleet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	f := fleet.StartT(t, fleet.Options{Clusters: 3})
	t.Logf("3 clusters ready in %s", time.Since(start).Round(time.Millisecond))
	pids := f.PIDs()
	if len(pids) != 6 {
		t.Fatalf("want 6 processes (3 etcd, 3 kube-apiserver), have %v", pids)
	}

	loader, err := fleet.NewLoader(f)
	if err != nil {
		t.Fatal(err)
	}
	spec := fleet.Spec{Namespaces: 3, Nodes: 6, PodsPerNamespace: 40, ConfigMapsPerNamespace: 20,
		DeploymentsPerNamespace: 3, WidgetsPerNamespace: 5, CRDClusters: []string{"fleet-1", "fleet-2"}}
	written, err := loader.Seed(ctx, spec)
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
	t.Logf("loader: %d creates in %s (%.0f/s)", written.Creates, written.Elapsed.Round(time.Millisecond), written.Rate())

	t.Run("read back from every kubeconfig context", func(t *testing.T) {
		for _, name := range f.Names() {
			cfg := contextConfig(t, f.Kubeconfig(), name)
			got := listAll(ctx, t, cfg, name == "fleet-3")
			want := map[string]fleet.Ref{}
			for _, r := range written.Objects[name] {
				want[r.Resource+"/"+r.Namespace+"/"+r.Name] = r
			}
			if len(want) != 3+6+3*(40+20+3)+map[bool]int{true: 0, false: 15}[name == "fleet-3"] {
				t.Errorf("%s: loader reported %d objects written", name, len(want))
			}
			for k, r := range want {
				g, ok := got[k]
				if !ok {
					t.Errorf("%s: %s written but not listed", name, k)
					continue
				}
				if g.UID != r.UID || g.ResourceVersion != r.ResourceVersion {
					t.Errorf("%s: %s: listed uid/rv %s/%s, written %s/%s", name, k, g.UID, g.ResourceVersion, r.UID, r.ResourceVersion)
				}
			}
		}
	})

	t.Run("CRD only where asked", func(t *testing.T) {
		for _, name := range f.Names() {
			dyn := dynamic.NewForConfigOrDie(contextConfig(t, f.Kubeconfig(), name))
			_, err := dyn.Resource(fleet.WidgetGVR).List(ctx, metav1.ListOptions{})
			if served := err == nil; served != (name != "fleet-3") {
				t.Errorf("%s: widgets served=%v (err %v)", name, served, err)
			}
		}
	})

	t.Run("limited identity is denied configmaps only", func(t *testing.T) {
		cs := kubernetes.NewForConfigOrDie(contextConfig(t, f.LimitedKubeconfig(), "fleet-2"))
		if _, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			t.Errorf("list pods as %s: %v", fleet.LimitedUser, err)
		}
		_, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{Limit: 1})
		if !apierrors.IsForbidden(err) {
			t.Errorf("list configmaps as %s: want 403, got %v", fleet.LimitedUser, err)
		}
	})

	t.Run("revoke gives 401, restore rewrites the kubeconfig", func(t *testing.T) {
		c, _ := f.Cluster("fleet-2")
		old := contextConfig(t, f.Kubeconfig(), "fleet-2")
		if err := c.Revoke(ctx); err != nil {
			t.Fatal(err)
		}
		cs := kubernetes.NewForConfigOrDie(old)
		err := eventually(ctx, 20*time.Second, func() error {
			_, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1})
			if !apierrors.IsUnauthorized(err) {
				return fmt.Errorf("want 401, got %v", err)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("revoked token: %v", err)
		}
		if err := c.Restore(ctx); err != nil {
			t.Fatal(err)
		}
		fresh := contextConfig(t, f.Kubeconfig(), "fleet-2")
		if fresh.BearerToken == old.BearerToken {
			t.Fatal("restore did not rewrite the token in the kubeconfig")
		}
		if _, err := kubernetes.NewForConfigOrDie(fresh).CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			t.Errorf("restored token: %v", err)
		}
		if _, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1}); !apierrors.IsUnauthorized(err) {
			t.Errorf("old token after restore: want 401, got %v", err)
		}
	})

	t.Run("API server restart keeps the data", func(t *testing.T) {
		c, _ := f.Cluster("fleet-1")
		cfg := contextConfig(t, f.Kubeconfig(), "fleet-1")
		before := listAll(ctx, t, cfg, false)
		oldPID := c.APIServer.PID
		if err := c.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		if pidAlive(oldPID) {
			t.Fatalf("kube-apiserver pid %d still alive after stop", oldPID)
		}
		if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
			t.Fatal("list succeeded with the API server stopped")
		}
		if err := c.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		after := listAll(ctx, t, cfg, false)
		if len(after) != len(before) {
			t.Errorf("after restart %d objects, before %d", len(after), len(before))
		}
		for k, r := range before {
			if a := after[k]; a.UID != r.UID || a.ResourceVersion != r.ResourceVersion {
				t.Errorf("%s changed across restart: %+v -> %+v", k, r, a)
			}
		}
	})

	t.Run("etcd killed and restarted", func(t *testing.T) {
		c, _ := f.Cluster("fleet-3")
		cs := kubernetes.NewForConfigOrDie(c.AdminConfig())
		if err := c.KillEtcd(); err != nil {
			t.Fatal(err)
		}
		if err := c.StartEtcd(ctx); err != nil {
			t.Fatal(err)
		}
		err := eventually(ctx, 60*time.Second, func() error {
			_, err := cs.CoreV1().ConfigMaps("load-0").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "after-etcd-"}}, metav1.CreateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("write after etcd restart: %v", err)
		}
	})

	t.Run("compaction makes a resumed watch 410", func(t *testing.T) {
		c, _ := f.Cluster("fleet-2")
		cs := kubernetes.NewForConfigOrDie(c.AdminConfig())
		list, err := cs.CoreV1().ConfigMaps("load-1").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		old := list.ResourceVersion
		for i := range 5 {
			if _, err := cs.CoreV1().ConfigMaps("load-1").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gap-%d", i)}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		rev, err := c.Compact(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("compacted at %d, resuming from %s", rev, old)
		// The API server's watch cache still holds the recent window; a restarted API server (as
		// after a control-plane upgrade) rebuilds it from the compacted etcd.
		if err := c.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		if err := c.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		err = watchExpired(ctx, cs, old)
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("stalling proxy", func(t *testing.T) {
		c, _ := f.Cluster("fleet-1")
		p, err := fleet.NewProxy(strings.TrimPrefix(c.URL(), "https://"))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		cfg := c.AdminConfig()
		cfg.Host = p.URL()
		cfg.Timeout = 2 * time.Second
		cs := kubernetes.NewForConfigOrDie(cfg)
		sent0, recv0 := p.Bytes()
		if _, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("through proxy: %v", err)
		}
		// A second list on the same TLS connection: at least its request and answer moved.
		sent1, recv1 := p.Bytes()
		if _, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		// The proxy counts a chunk once it has written it on, so the answer may reach the
		// client a moment before the request's bytes are counted.
		sent2, recv2 := p.Bytes()
		for deadline := time.Now().Add(2 * time.Second); sent2 <= sent1 && time.Now().Before(deadline); sent2, recv2 = p.Bytes() {
			time.Sleep(5 * time.Millisecond)
		}
		if sent1 <= sent0 || recv1 <= recv0 || sent2 <= sent1 || recv2-recv1 < 100 {
			t.Fatalf("byte counts %d/%d, %d/%d, %d/%d: each list must add to both", sent0, recv0, sent1, recv1, sent2, recv2)
		}
		w, err := kubernetes.NewForConfigOrDie(withoutTimeout(cfg)).CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		p.Stall()
		t0 := time.Now()
		_, err = cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err == nil {
			t.Fatal("list through a stalled proxy succeeded")
		}
		if d := time.Since(t0); d < 1500*time.Millisecond {
			t.Fatalf("stalled list failed after %s, not by the client timeout: %v", d, err)
		}
		p.Resume()
		if _, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("after resume: %v", err)
		}
		p.Drop()
		select {
		case _, ok := <-drain(w.ResultChan()):
			if ok {
				t.Fatal("watch still open after drop")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("watch not closed 10s after drop")
		}
	})

	t.Run("stop leaves no process", func(t *testing.T) {
		pids := f.PIDs()
		dir := f.Dir
		if err := f.Stop(); err != nil {
			t.Fatal(err)
		}
		for _, pid := range pids {
			if pidAlive(pid) {
				t.Errorf("pid %d alive after Stop", pid)
			}
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("dir %s left behind (%v)", dir, err)
		}
	})
}

func contextConfig(t *testing.T, kubeconfig, context string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if err != nil {
		t.Fatalf("kubeconfig %s context %s: %v", kubeconfig, context, err)
	}
	return cfg
}

// listAll lists what the loader writes, keyed resource/namespace/name.
func listAll(ctx context.Context, t *testing.T, cfg *rest.Config, noCRD bool) map[string]fleet.Ref {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(cfg)
	out := map[string]fleet.Ref{}
	add := func(res string, m metav1.Object) {
		out[res+"/"+m.GetNamespace()+"/"+m.GetName()] = fleet.Ref{Resource: res, Namespace: m.GetNamespace(), Name: m.GetName(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()}
	}
	sel := metav1.ListOptions{}
	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: "multicache.io/load=true"})
	must(t, err)
	for i := range nss.Items {
		add("namespaces", &nss.Items[i])
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, sel)
	must(t, err)
	for i := range nodes.Items {
		add("nodes", &nodes.Items[i])
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, sel)
	must(t, err)
	for i := range pods.Items {
		add("pods", &pods.Items[i])
	}
	cms, err := cs.CoreV1().ConfigMaps("").List(ctx, sel)
	must(t, err)
	for i := range cms.Items {
		if strings.HasPrefix(cms.Items[i].Namespace, "load-") && strings.HasPrefix(cms.Items[i].Name, "cm-") {
			add("configmaps", &cms.Items[i])
		}
	}
	deps, err := cs.AppsV1().Deployments("").List(ctx, sel)
	must(t, err)
	for i := range deps.Items {
		add("deployments", &deps.Items[i])
	}
	if !noCRD {
		ws, err := dynamic.NewForConfigOrDie(cfg).Resource(fleet.WidgetGVR).List(ctx, sel)
		must(t, err)
		for i := range ws.Items {
			add("widgets", &ws.Items[i])
		}
	}
	return out
}

func watchExpired(ctx context.Context, cs kubernetes.Interface, rv string) error {
	w, err := cs.CoreV1().ConfigMaps("load-1").Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("watch from %s: want 410, got %v", rv, err)
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		if ev.Type == watch.Error {
			if st := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(st) || apierrors.IsGone(st) {
				return nil
			}
		}
		return fmt.Errorf("watch from %s: want a 410 error event, got %s %v", rv, ev.Type, ev.Object)
	case <-time.After(10 * time.Second):
		return errors.New("watch from a compacted resourceVersion gave no event in 10s")
	}
}

func drain(ch <-chan watch.Event) <-chan watch.Event {
	out := make(chan watch.Event)
	go func() {
		for range ch {
		}
		close(out)
	}()
	return out
}

func withoutTimeout(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Timeout = 0
	return c
}

func eventually(ctx context.Context, d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func pidAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(b), ") Z ")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
