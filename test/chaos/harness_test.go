package chaos

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/server"
	"github.com/multicache/multicache/pkg/sources"
	"github.com/multicache/multicache/pkg/verify"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// env is one fleet, every cluster reached through a fault proxy, and a running Registry.
type env struct {
	t       *testing.T
	f       *fleet.Fleet
	loader  *fleet.Loader
	proxies map[string]*fleet.Proxy
	kc      string // the kubeconfig the Registry watches
	extra   map[string]string
	// repoint maps a context to the cluster whose API server (and credentials) it points at
	// instead of its own: its ground truth is then what that API server lists.
	repoint map[string]string
	reg     *clusterset.Registry
	// seen (fast) and slow (1 ms per event) are ConfigMap handlers whose final states are
	// compared with ground truth.
	seen, slow *harness.FinalStates
	// watch is a list-then-watch client of the daemon's HTTP API over every cluster's
	// ConfigMaps; watchOne watches fleet-2's only.
	watch, watchOne *watchClient
	api             string // the HTTP API's base URL
	srv             *server.Server
	results         *[]row
}

// row is one line of the reliability table.
type row struct {
	scenario, expected string
	converge           time.Duration
	diverged           int
	note               string
}

func (e *env) record(r row) {
	*e.results = append(*e.results, r)
	e.t.Logf("RESULT | %s | %s | %s | %d | %s", r.scenario, r.expected, r.converge.Round(10*time.Millisecond), r.diverged, r.note)
}

// writeKubeconfig writes the fleet's current kubeconfig with every server replaced by its proxy,
// plus the extra contexts (name → "limited" for the RBAC-restricted user on fleet-2).
func (e *env) writeKubeconfig() {
	e.t.Helper()
	cfg, err := clientcmd.LoadFromFile(e.f.Kubeconfig())
	if err != nil {
		e.t.Fatal(err)
	}
	for name, c := range cfg.Clusters {
		c.Server = e.proxies[name].URL()
	}
	orig := cfg.DeepCopy()
	for ctxName, target := range e.repoint {
		cfg.Clusters[ctxName] = orig.Clusters[target]
		cfg.AuthInfos[ctxName] = orig.AuthInfos[target]
	}
	if len(e.extra) > 0 {
		lim, err := clientcmd.LoadFromFile(e.f.LimitedKubeconfig())
		if err != nil {
			e.t.Fatal(err)
		}
		for name, of := range e.extra {
			cl := lim.Clusters[of].DeepCopy()
			cl.Server = e.proxies[of].URL()
			cfg.Clusters[name] = cl
			cfg.AuthInfos[name] = lim.AuthInfos[of]
			cfg.Contexts[name] = lim.Contexts[of].DeepCopy()
			cfg.Contexts[name].Cluster, cfg.Contexts[name].AuthInfo = name, name
		}
	}
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(e.kc+".tmp", b, 0o600); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(e.kc+".tmp", e.kc); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) servers(clusters ...string) map[string]*rest.Config {
	out := map[string]*rest.Config{}
	for _, name := range clusters {
		target := name
		if t, ok := e.repoint[name]; ok {
			target = t
		}
		c, _ := e.f.Cluster(target)
		out[name] = c.AdminConfig()
	}
	return out
}

// converge waits until every resource's cache equals ground truth in clusters, and every
// ConfigMap view (the fast and the slow handler, and the HTTP watch clients) equals it too; it
// returns how long that took and the number of diverged objects at the deadline.
func (e *env) converge(ctx context.Context, within time.Duration, clusters ...string) (time.Duration, int) {
	e.t.Helper()
	start := time.Now()
	servers := e.servers(clusters...)
	for {
		diverged, why := e.divergence(ctx, servers, clusters)
		if diverged == 0 {
			return time.Since(start), 0
		}
		if time.Since(start) > within {
			e.t.Errorf("not converged after %s: %s", within, strings.Join(why, " | "))
			return time.Since(start), diverged
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// divergence counts the objects that differ from what the API servers list: the caches of pods
// and ConfigMaps, and every ConfigMap view.
func (e *env) divergence(ctx context.Context, servers map[string]*rest.Config, clusters []string) (int, []string) {
	diverged := 0
	var why []string
	pods, _ := e.reg.Aggregate("pods")
	rep, err := verify.Compare(ctx, pods, harness.Pods, "", servers)
	if err != nil {
		return 1, []string{err.Error()}
	}
	diverged += len(rep.Diverged)
	if len(rep.Diverged) > 0 {
		why = append(why, rep.Summary())
	}
	truth, err := verify.Truth(ctx, harness.ConfigMaps, "", servers)
	if err != nil {
		return 1, []string{err.Error()}
	}
	want := map[string]string{}
	for k, v := range truth {
		want[k.String()] = v
	}
	cms, _ := e.reg.Aggregate("configmaps")
	views := map[string]map[string]string{"cache": cachedIn(cms, clusters), "fast handler": e.seen.InClusters(clusters...), "slow handler": e.slow.InClusters(clusters...)}
	if e.watch != nil {
		views["watch client"] = e.watch.InClusters(clusters...)
	}
	if e.watchOne != nil && slices.Contains(clusters, "fleet-2") {
		w := map[string]string{}
		for k, v := range want {
			if strings.HasPrefix(k, "fleet-2"+aggregate.Separator) {
				w[k] = v
			}
		}
		if d := harness.Diff(w, e.watchOne.InClusters("fleet-2")); len(d) > 0 {
			diverged += len(d)
			why = append(why, fmt.Sprintf("fleet-2 watch client: %d differ: %v", len(d), d[:min(3, len(d))]))
		}
	}
	for name, got := range views {
		if d := harness.Diff(want, got); len(d) > 0 {
			diverged += len(d)
			why = append(why, fmt.Sprintf("configmaps, %s: %d of %d differ: %v", name, len(d), len(want), d[:min(3, len(d))]))
		}
	}
	return diverged, why
}

// cachedIn is what agg holds in clusters: key → uid/resourceVersion.
func cachedIn(agg *aggregate.Aggregate, clusters []string) map[string]string {
	out := map[string]string{}
	for _, c := range clusters {
		idx, ok := agg.Cluster(c)
		if !ok {
			continue
		}
		for _, o := range idx.List() {
			out[harness.KeyOf(c, o)] = harness.StateOf(o)
		}
	}
	return out
}

func (e *env) waitState(what string, within time.Duration, cluster, resource string, want clusterset.State, errHas string) time.Duration {
	e.t.Helper()
	start := time.Now()
	for {
		if cs, ok := e.reg.ClusterStatus(cluster); ok {
			for _, r := range cs.Resources {
				if r.Resource == resource && r.State == want && strings.Contains(r.Error, errHas) {
					return time.Since(start)
				}
			}
		}
		if time.Since(start) > within {
			cs, _ := e.reg.ClusterStatus(cluster)
			e.t.Fatalf("%s: %s/%s not %s with %q after %s: %+v", what, cluster, resource, want, errHas, within, cs.Resources)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func setupEnv(t *testing.T, results *[]row) (*env, context.Context) {
	h := harness.Start(t, harness.Options{Seed: fleet.Spec{Namespaces: 2, Nodes: 4, PodsPerNamespace: 50, ConfigMapsPerNamespace: 50,
		WidgetsPerNamespace: 5, CRDClusters: []string{"fleet-1", "fleet-2"}}})
	ctx, f, loader := h.Ctx, h.Fleet, h.Loader
	// fleet-1 holds more ConfigMaps than a watch used to buffer (4,096), so that its leaving and
	// joining are bursts larger than that.
	if err := createConfigMaps(ctx, f, "fleet-1", "bulk", 5000); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, f: f, loader: loader, proxies: map[string]*fleet.Proxy{}, kc: filepath.Join(t.TempDir(), "kubeconfig"),
		extra: map[string]string{}, repoint: map[string]string{}, results: results, seen: harness.NewFinalStates(0), slow: harness.NewFinalStates(time.Millisecond)}
	for _, c := range f.Clusters {
		p, err := fleet.NewProxy(strings.TrimPrefix(c.URL(), "https://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		e.proxies[c.Name] = p
	}
	e.writeKubeconfig()
	src, err := sources.NewKubeconfig(sources.KubeconfigOptions{Paths: []string{e.kc}, PollInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.reg, err = clusterset.New(clusterset.Options{Source: src, DiscoveryInterval: time.Second, RetryMax: 2 * time.Second,
		ProbeInterval: 500 * time.Millisecond, ProbeTimeout: 2 * time.Second,
		Resources: []clusterset.ResourceSpec{{Name: "pods"}, {Name: "configmaps"}, {Name: "widgets"}}})
	if err != nil {
		t.Fatal(err)
	}
	cms, _ := e.reg.Aggregate("configmaps")
	for _, h := range []*harness.FinalStates{e.seen, e.slow} {
		if _, err := cms.AddEventHandler(h); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := server.New(server.Options{Registry: e.reg, BookmarkInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	e.api, e.srv = hs.URL, srv
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = e.reg.Start(rctx); close(done) }()
	t.Cleanup(func() {
		stop()
		hs.CloseClientConnections()
		hs.Close()
		<-done
	})
	if missing := e.reg.WaitForSync(ctx, 2*time.Minute); missing != nil {
		t.Fatalf("not synced: %v", missing)
	}
	e.watch = startWatchClient(ctx, e.api, "configmaps", nil)
	e.watchOne = startWatchClient(ctx, e.api, "configmaps", url.Values{"cluster": {"fleet-2"}})
	t.Cleanup(func() { e.watch.stop(); e.watchOne.stop() })
	return e, ctx
}

func loadKC(path string) (*clientcmdapi.Config, error) { return clientcmd.LoadFromFile(path) }

func saveKC(t *testing.T, cfg *clientcmdapi.Config, path string) {
	t.Helper()
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// createConfigMaps creates n empty ConfigMaps in namespace ns of cluster, 16 at a time.
func createConfigMaps(ctx context.Context, f *fleet.Fleet, cluster, ns string, n int) error {
	cs, err := f.Clientset(cluster)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	jobs := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range jobs {
				_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bulk-%d", i)}}, metav1.CreateOptions{})
				if err != nil {
					select {
					case errs <- fmt.Errorf("cluster %q: create %s/bulk-%d: %w", cluster, ns, i, err):
					default:
					}
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}
