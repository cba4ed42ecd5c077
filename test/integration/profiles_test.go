package integration

import (
	"context"
	"encoding/json"
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
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	mcrcache "github.com/multicache/multicache/pkg/crcache"
	"github.com/multicache/multicache/pkg/verify"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// inventory is a ClusterProfile inventory in the management cluster, written as a cluster
// manager writes it: the profile, then its status.
type inventory struct {
	t      *testing.T
	ctx    context.Context
	client dynamic.ResourceInterface
}

const inventoryNamespace = "fleet-inventory"

// installClusterProfiles installs the shipped ClusterProfile CRD in the cluster cfg reaches and
// creates the inventory namespace.
func installClusterProfiles(ctx context.Context, t testing.TB, cfg *rest.Config) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "crds", "clusterprofiles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		t.Fatalf("deploy/crds/clusterprofiles.yaml: %v", err)
	}
	ac := apiextensionsclient.NewForConfigOrDie(cfg)
	if _, err := ac.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	harness.WaitFor(t, "the ClusterProfile CRD is established", time.Minute, func() bool {
		got, err := ac.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true
			}
		}
		return false
	})
	cs := kubernetesFor(t, cfg)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: inventoryNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// profileAccess is one access provider of a profile: the provider's name, the member's server
// and CA, and the plugin's cluster config naming the fleet cluster whose token it hands out.
type profileAccess struct {
	provider, server string
	ca               []byte
	member           string
}

func accessTo(t testing.TB, c *fleet.Cluster, provider string) profileAccess {
	ca, err := os.ReadFile(c.CACertFile())
	if err != nil {
		t.Fatal(err)
	}
	return profileAccess{provider: provider, server: c.URL(), ca: ca, member: c.Name}
}

// set creates or updates profile name with health ("True", "False") and access.
func (inv *inventory) set(name, health string, access profileAccess) {
	inv.t.Helper()
	u, err := inv.client.Get(inv.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		u = &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
			"metadata": map[string]any{"name": name, "labels": map[string]any{"x-k8s.io/cluster-manager": "test"}},
			"spec":     map[string]any{"displayName": name, "clusterManager": map[string]any{"name": "test"}},
		}}
		if u, err = inv.client.Create(inv.ctx, u, metav1.CreateOptions{}); err != nil {
			inv.t.Fatalf("create ClusterProfile %s: %v", name, err)
		}
	} else if err != nil {
		inv.t.Fatal(err)
	}
	cluster := map[string]any{"server": access.server, "certificate-authority-data": access.ca,
		"extensions": []any{map[string]any{"name": clusterset.ExecExtension, "extension": map[string]any{"cluster": access.member}}}}
	var status map[string]any
	b, _ := json.Marshal(map[string]any{
		"conditions": []any{map[string]any{"type": clusterset.ControlPlaneHealthy, "status": health, "reason": "Probed",
			"message": "probed by the test", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
		"accessProviders": []any{map[string]any{"name": access.provider, "cluster": cluster}},
	})
	if err := json.Unmarshal(b, &status); err != nil {
		inv.t.Fatal(err)
	}
	u.Object["status"] = status
	if _, err := inv.client.UpdateStatus(inv.ctx, u, metav1.UpdateOptions{}); err != nil {
		inv.t.Fatalf("status of ClusterProfile %s: %v", name, err)
	}
}

// writeProviderFile writes a provider file naming the test plugin twice: "fleet-tokens" hands
// out each member's exec token, "broken" fails.
func writeProviderFile(t testing.TB, plugin, fleetDir, log string) string {
	b, err := json.Marshal(map[string]any{"providers": []any{
		map[string]any{"name": "fleet-tokens", "execConfig": map[string]any{"apiVersion": "client.authentication.k8s.io/v1",
			"command": plugin, "args": []string{"--fleet-dir", fleetDir, "--log", log}, "provideClusterInfo": true}},
		map[string]any{"name": "broken", "execConfig": map[string]any{"apiVersion": "client.authentication.k8s.io/v1",
			"command": plugin, "args": []string{"--fail", "token service unavailable"}, "provideClusterInfo": true}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "providers.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

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
	installClusterProfiles(ctx, t, mgmt.AdminConfig())
	dc := dynamic.NewForConfigOrDie(mgmt.AdminConfig())
	inv := &inventory{t: t, ctx: ctx, client: dc.Resource(clusterset.ClusterProfileGVR).Namespace(inventoryNamespace)}

	plugin := fleet.BuildExecPluginT(t)
	pluginLog := filepath.Join(t.TempDir(), "plugin.log")
	providers := writeProviderFile(t, plugin, f.Dir, pluginLog)

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

	// m2 and m3 start unhealthy; m2b (fleet-2 again, under another name) is healthy; unknown
	// offers a provider the file does not name; failing's plugin fails.
	inv.set("m2", "False", accessTo(t, c2, "fleet-tokens"))
	inv.set("m3", "False", accessTo(t, c3, "fleet-tokens"))
	inv.set("m2b", "True", accessTo(t, c2, "fleet-tokens"))
	inv.set("unknown", "True", accessTo(t, c3, "nobody"))
	inv.set("failing", "True", accessTo(t, c3, "broken"))

	src, err := clusterset.NewClusterProfiles(clusterset.ClusterProfilesOptions{Client: dc, Namespace: inventoryNamespace,
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
	harness.WaitFor(t, "m2b synced, unknown and failing failed", time.Minute, func() bool {
		return status("m2b").State == clusterset.Synced && status("unknown").State == clusterset.Failed && status("failing").State == clusterset.Failed
	})
	if got := reg.Clusters(); !slices.Equal(got, []string{"failing", "m2b", "unknown"}) {
		t.Fatalf("clusters %v: m2 and m3 are unhealthy and must wait", got)
	}
	if e := status("unknown").Error; !strings.Contains(e, `"nobody"`) || !strings.Contains(e, "provider file") {
		t.Errorf("unknown's error %q: want the provider's name and the provider file", e)
	}
	if e := status("failing").Error; !strings.Contains(e, "credentials: exec: executable "+plugin+" failed with exit code 1") {
		t.Errorf("failing's error %q: want the plugin's failure", e)
	}

	// Healthy: they join and sync, and the Provider engages them.
	inv.set("m2", "True", accessTo(t, c2, "fleet-tokens"))
	inv.set("m3", "True", accessTo(t, c3, "fleet-tokens"))
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
	before := count("m3")
	inv.set("m3", "False", accessTo(t, c3, "fleet-tokens"))
	harness.WaitFor(t, "m3 Degraded", 30*time.Second, func() bool { return status("m3").State == clusterset.Degraded })
	if s := status("m3"); !strings.Contains(s.Error, "ControlPlaneHealthy is False") || s.Restarts != 0 || count("m3") < before || !reg.Running("m3") {
		t.Fatalf("m3 unhealthy: error %q, restarts %d, %d objects (had %d)", s.Error, s.Restarts, count("m3"), before)
	}
	harness.Converge(ctx, t, agg, harness.ConfigMaps, members("m3"), 30*time.Second)
	inv.set("m3", "True", accessTo(t, c3, "fleet-tokens"))
	harness.WaitFor(t, "m3 Synced again", 30*time.Second, func() bool { return status("m3").State == clusterset.Synced })

	// m2's CA and m2b's server change (the same API servers, reached another way): each
	// restarts, alone.
	a2 := accessTo(t, c2, "fleet-tokens")
	a2.ca = append(append([]byte{}, a2.ca...), a2.ca...) // the CA twice: another bundle, the same trust
	inv.set("m2", "True", a2)
	a2b := accessTo(t, c2, "fleet-tokens")
	a2b.server = strings.Replace(a2b.server, "127.0.0.1", "localhost", 1)
	inv.set("m2b", "True", a2b)
	harness.WaitFor(t, "m2 and m2b restarted and synced", time.Minute, func() bool {
		return status("m2").Restarts == 1 && status("m2b").Restarts == 1 && status("m2").State == clusterset.Synced && status("m2b").State == clusterset.Synced
	})
	if r := status("m3").Restarts; r != 0 {
		t.Errorf("m3 restarted %d times: only m2 and m2b changed", r)
	}
	harness.Converge(ctx, t, agg, harness.ConfigMaps, members("m2", "m2b", "m3"), 30*time.Second)

	// m3 deleted: it leaves, handlers see its deletes, and the Provider disengages it.
	m3Keys := harness.InClusters(handler.InClusters(), "m3")
	if err := inv.client.Delete(ctx, "m3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, "m3 left", 30*time.Second, func() bool { return !reg.Running("m3") && len(handler.InClusters("m3")) == 0 })
	harness.WaitFor(t, "the Provider disengages m3", 30*time.Second, func() bool {
		_, err := provider.Get(ctx, "m3")
		return err != nil
	})

	// The writes stop; the final state of the cache and of the handler is what the members list.
	stopWrites()
	writers.Wait()
	if writes.Load() < 100 {
		t.Fatalf("only %d writes went through", writes.Load())
	}
	final := members("m2", "m2b")
	harness.Converge(ctx, t, agg, harness.ConfigMaps, final, 30*time.Second)
	truth := groundTruthOf(ctx, t, final)
	harness.WaitFor(t, "the handler's final state is the members'", 30*time.Second, func() bool {
		return len(diff(truth, handler.InClusters())) == 0
	})
	if p := handler.Problems(); len(p) > 0 {
		t.Errorf("handler inconsistencies: %v", p)
	}
	// No object was ever deleted on a server: every delete a handler saw is one of m3's.
	handler.mu.Lock()
	for k, n := range handler.deletes {
		if _, ok := m3Keys[k]; !ok {
			t.Errorf("handler told %d× of the deletion of %s, which was never deleted", n, k)
		}
	}
	handler.mu.Unlock()
	t.Logf("%d writes; %d deletes told, all of m3's %d objects", writes.Load(), len(handler.deletes), len(m3Keys))
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
