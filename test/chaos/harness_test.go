package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/verify"
	"github.com/multicache/multicache/test/fleet"
)

var (
	podsGVR    = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	cmGVR      = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	widgetsGVR = fleet.WidgetGVR
)

// env is one fleet, every cluster reached through a fault proxy, and a running Registry.
type env struct {
	t       *testing.T
	f       *fleet.Fleet
	loader  *fleet.Loader
	proxies map[string]*fleet.Proxy
	kc      string // the kubeconfig the Registry watches
	extra   map[string]string
	reg     *clusterset.Registry
	seen    *finalStates
	results *[]row
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
		c, _ := e.f.Cluster(name)
		out[name] = c.AdminConfig()
	}
	return out
}

// converge waits until every resource equals ground truth in clusters, and the handler's final
// states equal it too; it returns how long that took and the diverged count at the deadline.
func (e *env) converge(ctx context.Context, within time.Duration, clusters ...string) (time.Duration, int) {
	e.t.Helper()
	start := time.Now()
	var last []string
	for {
		diverged := 0
		last = last[:0]
		for res, gvr := range map[string]schema.GroupVersionResource{"pods": podsGVR, "configmaps": cmGVR} {
			agg, _ := e.reg.Aggregate(res)
			rep, err := verify.Compare(ctx, agg, gvr, "", e.servers(clusters...))
			if err != nil {
				last = append(last, err.Error())
				diverged++
				continue
			}
			diverged += len(rep.Diverged)
			if len(rep.Diverged) > 0 {
				last = append(last, rep.Summary())
			}
			if res == "configmaps" {
				want := map[string]string{}
				for _, name := range clusters {
					idx, _ := agg.Cluster(name)
					if idx == nil {
						continue
					}
					for _, o := range idx.List() {
						m, _ := meta.Accessor(o)
						want[aggregate.Key{Cluster: name, Namespace: m.GetNamespace(), Name: m.GetName()}.String()] = string(m.GetUID()) + "/" + m.GetResourceVersion()
					}
				}
				got := e.seen.forClusters(clusters)
				if d := diffMaps(want, got); len(d) > 0 {
					diverged += len(d)
					last = append(last, fmt.Sprintf("handler: %d differ from the cache: %v", len(d), d[:min(3, len(d))]))
				}
			}
		}
		if diverged == 0 {
			return time.Since(start), 0
		}
		if time.Since(start) > within {
			e.t.Errorf("not converged after %s: %s", within, strings.Join(last, " | "))
			return time.Since(start), diverged
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func diffMaps(want, got map[string]string) []string {
	var d []string
	for k, v := range want {
		if got[k] != v {
			d = append(d, fmt.Sprintf("%s want %s got %q", k, v, got[k]))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, "extra "+k)
		}
	}
	sort.Strings(d)
	return d
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

// finalStates records, per object, the last state a handler saw, and every inconsistency.
type finalStates struct {
	mu     sync.Mutex
	state  map[string]string
	errors []string
	delay  time.Duration
}

func newFinalStates(delay time.Duration) *finalStates {
	return &finalStates{state: map[string]string{}, delay: delay}
}

func stateOf(obj any) string {
	m, _ := meta.Accessor(obj)
	return string(m.GetUID()) + "/" + m.GetResourceVersion()
}

func keyOf(cluster string, obj any) string {
	k, _ := aggregate.KeyOf(cluster, obj)
	return k.String()
}

func (s *finalStates) OnAdd(cluster string, obj any, _ bool) {
	time.Sleep(s.delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := keyOf(cluster, obj)
	if _, dup := s.state[k]; dup {
		s.errors = append(s.errors, "duplicate add "+k)
	}
	s.state[k] = stateOf(obj)
}

func (s *finalStates) OnUpdate(cluster string, _, obj any) {
	time.Sleep(s.delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := keyOf(cluster, obj)
	if _, ok := s.state[k]; !ok {
		s.errors = append(s.errors, "update of unknown "+k)
	}
	s.state[k] = stateOf(obj)
}

func (s *finalStates) OnDelete(cluster string, obj any) {
	time.Sleep(s.delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := keyOf(cluster, obj)
	if _, ok := s.state[k]; !ok {
		s.errors = append(s.errors, "delete of unknown "+k)
	}
	delete(s.state, k)
}

func (s *finalStates) forClusters(clusters []string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, v := range s.state {
		for _, c := range clusters {
			if strings.HasPrefix(k, c+aggregate.Separator) {
				out[k] = v
			}
		}
	}
	return out
}

func (s *finalStates) problems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errors...)
}

func setupEnv(t *testing.T, results *[]row) (*env, context.Context) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	f := fleet.StartT(t, fleet.Options{Clusters: 3})
	loader, err := fleet.NewLoader(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loader.Seed(ctx, fleet.Spec{Namespaces: 2, Nodes: 4, PodsPerNamespace: 50, ConfigMapsPerNamespace: 50,
		WidgetsPerNamespace: 5, CRDClusters: []string{"fleet-1", "fleet-2"}}); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, f: f, loader: loader, proxies: map[string]*fleet.Proxy{}, kc: filepath.Join(t.TempDir(), "kubeconfig"),
		extra: map[string]string{}, results: results, seen: newFinalStates(0)}
	for _, c := range f.Clusters {
		p, err := fleet.NewProxy(strings.TrimPrefix(c.URL(), "https://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		e.proxies[c.Name] = p
	}
	e.writeKubeconfig()
	src, err := clusterset.NewKubeconfig(clusterset.KubeconfigOptions{Paths: []string{e.kc}, PollInterval: 200 * time.Millisecond})
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
	if _, err := cms.AddEventHandler(e.seen); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = e.reg.Start(rctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	if missing := e.reg.WaitForSync(ctx, 2*time.Minute); missing != nil {
		t.Fatalf("not synced: %v", missing)
	}
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
