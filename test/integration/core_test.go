package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/workqueue"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/index"
	"github.com/multicache/multicache/pkg/sources"
	"github.com/multicache/multicache/pkg/verify"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// truth is key → uid/resourceVersion (verify.State).
type truth = map[string]string

// groundTruth is what the API servers of clusters list of gvr.
func groundTruth(ctx context.Context, t *testing.T, f *fleet.Fleet, gvr schema.GroupVersionResource, clusters ...string) truth {
	t.Helper()
	tr, err := verify.Truth(ctx, gvr, "", servers(t, f, clusters...))
	if err != nil {
		t.Fatal(err)
	}
	return harness.Truth(tr)
}

func servers(t *testing.T, f *fleet.Fleet, clusters ...string) map[string]*rest.Config {
	out := map[string]*rest.Config{}
	for _, name := range clusters {
		c, err := f.Cluster(name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = c.AdminConfig()
	}
	return out
}

// converge waits until agg equals what the API servers of clusters list.
func converge(ctx context.Context, t *testing.T, f *fleet.Fleet, agg *aggregate.Aggregate, gvr schema.GroupVersionResource, clusters ...string) {
	t.Helper()
	harness.Converge(ctx, t, agg, gvr, servers(t, f, clusters...), 30*time.Second)
}

func diff(want, got truth) []string { return harness.Diff(want, got) }

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	harness.WaitFor(t, what, 60*time.Second, f)
}

// writeKubeconfig writes the fleet's kubeconfig limited to contexts, plus extra contexts.
func writeKubeconfig(t *testing.T, f *fleet.Fleet, path string, contexts []string, extra func(*clientcmdapi.Config)) {
	t.Helper()
	full, err := clientcmd.LoadFromFile(f.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	out := clientcmdapi.NewConfig()
	for _, c := range contexts {
		out.Contexts[c] = full.Contexts[c]
		out.Clusters[c] = full.Clusters[c]
		out.AuthInfos[c] = full.AuthInfos[c]
	}
	if extra != nil {
		extra(out)
	}
	b, err := clientcmd.Write(*out)
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

var (
	podsGVR    = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	cmGVR      = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	nodesGVR   = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	deployGVR  = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	nsGVR      = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	widgetsGVR = fleet.WidgetGVR
)

func TestCoreOnLocalFleet(t *testing.T) {
	env := harness.Start(t, harness.Options{Timeout: 10 * time.Minute, Seed: fleet.Spec{Namespaces: 3, Nodes: 5, PodsPerNamespace: 60, ConfigMapsPerNamespace: 20,
		DeploymentsPerNamespace: 3, WidgetsPerNamespace: 10, CRDClusters: []string{"fleet-1", "fleet-2"}}})
	ctx, f, loader := env.Ctx, env.Fleet, env.Loader
	// Different objects in each cluster: extra ConfigMaps named after the cluster.
	for i, name := range f.Names() {
		cs, _ := f.Clientset(name)
		for j := range (i + 1) * 7 {
			_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("only-%s-%d", name, j), Labels: map[string]string{"only": name}}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		}
	}

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	writeKubeconfig(t, f, kubeconfig, f.Names(), nil)
	src, err := sources.NewKubeconfig(sources.KubeconfigOptions{Paths: []string{kubeconfig}, Include: []string{"fleet-*", "broken"}, PollInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	nodeJSONPath, err := index.Compile(index.Spec{Name: "jp-node", JSONPath: "{.spec.nodeName}"})
	if err != nil {
		t.Fatal(err)
	}
	teamCEL, err := index.Compile(index.Spec{Name: "cel-team", CEL: "object.metadata.labels['team']"})
	if err != nil {
		t.Fatal(err)
	}
	podIndexes := []aggregate.IndexSpec{
		{Name: index.Label, Func: index.ByLabel}, {Name: index.NodeName, Func: index.ByNodeName},
		{Name: index.Image, Func: index.ByImage}, {Name: index.Owner, Func: index.ByOwner},
		{Name: "jp-node", Func: nodeJSONPath}, {Name: "cel-team", Func: teamCEL},
		{Name: "cel-team-f1", Func: teamCEL, Clusters: []string{"fleet-1"}},
	}
	reg, err := clusterset.New(clusterset.Options{
		Source: src,
		Logger: zaptest.NewLogger(t),
		Resources: []clusterset.ResourceSpec{
			{Name: "pods", Indexes: podIndexes},
			{Name: "cm"},
			{Name: "Node", Indexes: []aggregate.IndexSpec{{Name: index.Label, Func: index.ByLabel}}},
			{Name: "deployments.apps"},
			{Name: "namespaces", Mode: clusterset.ModeMetadata},
			{Name: "widgets"},
		},
		DiscoveryInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	pods, _ := reg.Aggregate("pods")
	cms, _ := reg.Aggregate("cm")
	handlerSeen := harness.NewFinalStates(0)
	hreg, err := cms.AddEventHandler(handlerSeen)
	if err != nil {
		t.Fatal(err)
	}
	// Every status change, as a dashboard subscribed before Start would see them.
	changesCh, unsubscribe := reg.Subscribe(4096)
	defer unsubscribe()
	var changesMu sync.Mutex
	var changes []clusterset.StatusChange
	go func() {
		for c := range changesCh {
			changesMu.Lock()
			changes = append(changes, c)
			changesMu.Unlock()
		}
	}()
	changed := func(match func(clusterset.StatusChange) bool) bool {
		changesMu.Lock()
		defer changesMu.Unlock()
		return slices.ContainsFunc(changes, match)
	}
	regCtx, stopReg := context.WithCancel(ctx)
	regDone := make(chan struct{})
	go func() { _ = reg.Start(regCtx); close(regDone) }()
	defer func() { stopReg(); <-regDone }()

	if missing := reg.WaitForSync(ctx, 2*time.Minute); missing != nil {
		t.Fatalf("not synced: %v\n%+v", missing, reg.Status())
	}
	all := f.Names()
	t.Run("sync progress counts what each API server sent", func(t *testing.T) {
		// No writes run yet: each initial list's count is what the cache holds. Resources
		// that no controller writes to are compared exactly.
		for _, cs := range reg.Status() {
			for _, rs := range cs.Resources {
				if rs.State != clusterset.Synced || !slices.Contains([]string{"cm", "Node", "namespaces", "widgets"}, rs.Resource) {
					continue
				}
				agg, _ := reg.Aggregate(rs.Resource)
				idx, _ := agg.Cluster(cs.Name)
				n := int64(len(idx.ListKeys()))
				if p := rs.Progress; p.Listing || p.Loaded != n || p.Expected != n {
					t.Errorf("%s %s: progress %+v, the cache holds %d", cs.Name, rs.Resource, p, n)
				}
			}
		}
	})
	t.Run("aggregate equals the union of the API servers", func(t *testing.T) {
		for res, gvr := range map[string]schema.GroupVersionResource{"pods": podsGVR, "cm": cmGVR, "Node": nodesGVR, "deployments.apps": deployGVR, "namespaces": nsGVR} {
			agg, _ := reg.Aggregate(res)
			converge(ctx, t, f, agg, gvr, all...)
		}
		widgets, _ := reg.Aggregate("widgets")
		converge(ctx, t, f, widgets, widgetsGVR, "fleet-1", "fleet-2")
	})

	t.Run("Subscribe reports every cluster × resource reaching its state", func(t *testing.T) {
		for _, c := range all {
			for _, res := range []string{"pods", "cm", "Node", "deployments.apps", "namespaces", "widgets"} {
				want := clusterset.Synced
				if res == "widgets" && c == "fleet-3" {
					want = clusterset.NotServed
				}
				waitFor(t, fmt.Sprintf("a change of %s/%s to %s", c, res, want), func() bool {
					return changed(func(ch clusterset.StatusChange) bool { return ch.Cluster == c && ch.Resource == res && ch.To == want })
				})
			}
		}
	})

	t.Run("decoding modes", func(t *testing.T) {
		o, _, _ := pods.GetByKey("fleet-2|load-0/pod-1")
		p, ok := o.(*corev1.Pod)
		if !ok {
			t.Fatalf("pods are %T, want typed *v1.Pod", o)
		}
		if p.ManagedFields != nil {
			t.Error("managedFields kept by the default transform")
		}
		nss, _ := reg.Aggregate("namespaces")
		if o, _, _ := nss.GetByKey("fleet-1|load-0"); o == nil {
			t.Error("namespace missing")
		} else if _, ok := o.(*metav1.PartialObjectMetadata); !ok {
			t.Errorf("namespaces are %T, want metadata-only", o)
		}
		widgets, _ := reg.Aggregate("widgets")
		if keys := widgets.ListKeys(); len(keys) == 0 {
			t.Error("no widgets")
		} else if o, _, _ := widgets.GetByKey(keys[0]); fmt.Sprintf("%T", o) != "*unstructured.Unstructured" {
			t.Errorf("widgets are %T, want unstructured", o)
		}
	})

	t.Run("cached objects equal the API server's, parts shared", func(t *testing.T) {
		// Ground truth for content, not only UID and resourceVersion: the default transform
		// drops managedFields and shares repeated parts, and must change nothing else.
		deploys, _ := reg.Aggregate("deployments.apps")
		compared, total := 0, 0
		for _, name := range all {
			cs, _ := f.Clientset(name)
			pl, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			dl, err := cs.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var live []metav1.Object
			for i := range pl.Items {
				live = append(live, &pl.Items[i])
			}
			for i := range dl.Items {
				live = append(live, &dl.Items[i])
			}
			for _, want := range live {
				want.SetManagedFields(nil)
				agg := pods
				if _, ok := want.(*appsv1.Deployment); ok {
					agg = deploys
				}
				k := aggregate.Key{Cluster: name, Namespace: want.GetNamespace(), Name: want.GetName()}
				got, ok, _ := agg.GetByKey(k.String())
				if !ok {
					t.Errorf("%s missing", k)
					continue
				}
				if g := got.(metav1.Object); g.GetResourceVersion() != want.GetResourceVersion() {
					t.Errorf("%s: cache has resourceVersion %s, the API server %s (nothing writes meanwhile)", k, g.GetResourceVersion(), want.GetResourceVersion())
					continue
				}
				compared++
				if !apiequality.Semantic.DeepEqual(got, want) {
					t.Errorf("%s differs from the API server's object:\n got %+v\nwant %+v", k, got, want)
				}
			}
			total += len(live)
		}
		// 3 clusters × (180 Pods + 9 Deployments).
		if compared != total || total < 3*(180+9) {
			t.Errorf("compared %d of %d objects listed (want every one of at least %d)", compared, total, 3*(180+9))
		}
		t.Logf("compared %d Pods and Deployments field by field with their API servers", compared)
		var p1, p2 *corev1.Pod
		for _, o := range pods.List() {
			p := o.(*corev1.Pod)
			if len(p.Spec.Containers) == 0 || len(p.Spec.Containers[0].Resources.Requests) == 0 {
				continue
			}
			if p1 == nil {
				p1 = p
			} else if apiequality.Semantic.DeepEqual(p.Spec.Containers[0].Resources.Requests, p1.Spec.Containers[0].Resources.Requests) {
				p2 = p
				break
			}
		}
		if p2 == nil {
			t.Fatal("no two pods with equal resource requests to compare")
		}
		if reflect.ValueOf(p1.Spec.Containers[0].Resources.Requests).Pointer() != reflect.ValueOf(p2.Spec.Containers[0].Resources.Requests).Pointer() {
			t.Error("equal resource lists of two cached pods are separate copies; the default shares them")
		}
	})

	t.Run("CRD not served in fleet-3 fails nothing", func(t *testing.T) {
		cs, _ := reg.ClusterStatus("fleet-3")
		if cs.State != clusterset.Synced {
			t.Errorf("fleet-3 state %s (%s)", cs.State, cs.Error)
		}
		for _, r := range cs.Resources {
			if r.Resource == "widgets" && (r.State != clusterset.NotServed || !strings.Contains(r.Error, "not served")) {
				t.Errorf("fleet-3 widgets: %+v", r)
			}
		}
	})

	t.Run("indexes answer as brute force over ground truth", func(t *testing.T) {
		// Ground truth: every pod, decoded, from every API server.
		type gp struct {
			cluster string
			pod     corev1.Pod
		}
		var truthPods []gp
		for _, name := range all {
			cs, _ := f.Clientset(name)
			list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range list.Items {
				truthPods = append(truthPods, gp{name, p})
			}
		}
		brute := func(pred func(gp) bool) []string {
			var out []string
			for _, p := range truthPods {
				if pred(p) {
					out = append(out, aggregate.Key{Cluster: p.cluster, Namespace: p.pod.Namespace, Name: p.pod.Name}.String())
				}
			}
			sort.Strings(out)
			return out
		}
		hasImage := func(p corev1.Pod, img string) bool {
			for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
				if c.Image == img {
					return true
				}
			}
			return false
		}
		for _, tc := range []struct {
			index, value string
			pred         func(gp) bool
		}{
			{aggregate.IndexCluster, "fleet-2", func(p gp) bool { return p.cluster == "fleet-2" }},
			{aggregate.IndexNamespace, "load-1", func(p gp) bool { return p.pod.Namespace == "load-1" }},
			{aggregate.IndexClusterNamespace, "fleet-3/load-2", func(p gp) bool { return p.cluster == "fleet-3" && p.pod.Namespace == "load-2" }},
			{index.Label, "app=app-3", func(p gp) bool { return p.pod.Labels["app"] == "app-3" }},
			{index.Label, "tier", func(p gp) bool { _, ok := p.pod.Labels["tier"]; return ok }},
			{index.NodeName, "node-2", func(p gp) bool { return p.pod.Spec.NodeName == "node-2" }},
			{index.Image, "busybox:1.37", func(p gp) bool { return hasImage(p.pod, "busybox:1.37") }},
			{index.Image, "nginx:1.27.3", func(p gp) bool { return hasImage(p.pod, "nginx:1.27.3") }},
			{"jp-node", "node-4", func(p gp) bool { return p.pod.Spec.NodeName == "node-4" }},
			{"cel-team", "team-2", func(p gp) bool { return p.pod.Labels["team"] == "team-2" }},
			{"cel-team-f1", "team-2", func(p gp) bool { return p.cluster == "fleet-1" && p.pod.Labels["team"] == "team-2" }},
		} {
			got, err := pods.IndexKeys(tc.index, tc.value)
			if err != nil {
				t.Fatalf("%s=%s: %v", tc.index, tc.value, err)
			}
			sort.Strings(got)
			want := brute(tc.pred)
			if len(want) == 0 {
				t.Fatalf("%s=%s: ground truth is empty, the test proves nothing", tc.index, tc.value)
			}
			if d := diff(toTruth(want), toTruth(got)); len(d) > 0 {
				t.Errorf("%s=%s: %d differences: %v", tc.index, tc.value, len(d), d[:min(5, len(d))])
			}
		}
		sel, _ := labels.Parse("tier=cache,team in (team-1,team-3)")
		res, err := pods.Select(aggregate.Query{Clusters: []string{"fleet-1", "fleet-3"}, Namespace: "load-0", Labels: sel})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, it := range res.Items {
			got = append(got, it.Key().String())
		}
		sort.Strings(got)
		want := brute(func(p gp) bool {
			return (p.cluster == "fleet-1" || p.cluster == "fleet-3") && p.pod.Namespace == "load-0" && sel.Matches(labels.Set(p.pod.Labels))
		})
		if fmt.Sprint(got) != fmt.Sprint(want) || len(want) == 0 || len(res.Unsynced) != 0 {
			t.Errorf("Select: got %v (unsynced %v), want %v", got, res.Unsynced, want)
		}
		if idx, ok := pods.Cluster("fleet-1"); !ok {
			t.Error("Cluster(fleet-1) missing")
		} else if keys, _ := idx.IndexKeys(cache.NamespaceIndex, "load-0"); len(keys) != 60 {
			t.Errorf("Cluster(fleet-1) namespace load-0 has %d pods, want 60", len(keys))
		}
	})

	t.Run("handlers see one final state per object under churn", func(t *testing.T) {
		if !hreg.HasSynced() {
			waitFor(t, "handler HasSynced", hreg.HasSynced)
		}
		res, err := loader.Churn(ctx, fleet.ChurnSpec{Rate: 300, Duration: 5 * time.Second, Namespace: "churn"})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("churn: %d creates, %d updates, %d deletes, %d errors", res.Creates, res.Updates, res.Deletes, res.Errors)
		converge(ctx, t, f, cms, cmGVR, all...)
		want := groundTruth(ctx, t, f, cmGVR, all...)
		var d []string
		waitFor(t, "handler converged", func() bool {
			got := handlerSeen.InClusters()
			d = diff(want, got)
			return len(d) == 0
		})
		if errs := handlerSeen.Problems(); len(errs) > 0 {
			t.Errorf("handler saw inconsistent events: %v", errs[:min(10, len(errs))])
		}
	})

	t.Run("a workqueue controller reconciles every object at its last change, in every cluster", func(t *testing.T) {
		queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[aggregate.Key](time.Millisecond, 50*time.Millisecond))
		defer queue.ShutDown()
		reg, err := cms.AddEventHandler(aggregate.QueueKeys(queue))
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Remove()
		var mu sync.Mutex
		last := truth{}           // key → uid/rv a worker last reconciled, or "gone"
		times := map[string]int{} // key@state → reconciles
		retried := 0
		worker := func() {
			for {
				k, shutdown := queue.Get()
				if shutdown {
					return
				}
				obj, exists, err := cms.Get(k)
				mu.Lock()
				state := "gone"
				if exists {
					state = harness.StateOf(obj)
				}
				switch {
				case err != nil:
					t.Errorf("Get(%s): %v", k, err)
				case strings.HasSuffix(k.Name, "-7") && times[k.String()+"@"+state] == 0 && retried < 20:
					// Some reconciles fail once: the queue retries them with backoff.
					retried++
					times[k.String()+"@"+state] = -1
					queue.AddRateLimited(k)
				default:
					last[k.String()] = state
					times[k.String()+"@"+state]++
					queue.Forget(k)
				}
				mu.Unlock()
				queue.Done(k)
			}
		}
		for range 2 {
			go worker()
		}
		res, err := loader.Churn(ctx, fleet.ChurnSpec{Rate: 300, Duration: 4 * time.Second, Namespace: "queued", Prefix: "q"})
		if err != nil {
			t.Fatal(err)
		}
		converge(ctx, t, f, cms, cmGVR, all...)
		want := groundTruth(ctx, t, f, cmGVR, all...)
		waitFor(t, "workers reconciled the final state of every object", func() bool {
			mu.Lock()
			defer mu.Unlock()
			for k, v := range want {
				if last[k] != v {
					return false
				}
			}
			for k, v := range last {
				if _, ok := want[k]; !ok && v != "gone" {
					return false
				}
			}
			return queue.Len() == 0
		})
		mu.Lock()
		defer mu.Unlock()
		for ks, n := range times {
			if n > 1 {
				t.Errorf("%s reconciled %d times for one state", ks, n)
			}
		}
		if retried == 0 {
			t.Error("no reconcile failed: the retry path was not exercised")
		}
		t.Logf("churn %d creates, %d updates, %d deletes in 3 clusters; %d objects reconciled at their final state; %d failed reconciles retried",
			res.Creates, res.Updates, res.Deletes, len(want), retried)
	})

	t.Run("bad credential fails one cluster only", func(t *testing.T) {
		writeKubeconfig(t, f, kubeconfig, all, func(c *clientcmdapi.Config) {
			c.Clusters["broken"] = c.Clusters["fleet-1"].DeepCopy()
			c.AuthInfos["broken"] = &clientcmdapi.AuthInfo{Token: "not-a-valid-token"}
			c.Contexts["broken"] = &clientcmdapi.Context{Cluster: "broken", AuthInfo: "broken"}
		})
		waitFor(t, "broken cluster Failed", func() bool {
			cs, ok := reg.ClusterStatus("broken")
			return ok && cs.State == clusterset.Failed && strings.Contains(cs.Error, "401")
		})
		cs, _ := reg.ClusterStatus("broken")
		t.Logf("broken: %s: %s", cs.State, cs.Error)
		if !changed(func(ch clusterset.StatusChange) bool {
			return ch.Cluster == "broken" && ch.To == clusterset.Failed && strings.Contains(ch.Error, "401")
		}) {
			t.Error("no status change to Failed with the 401 was published for the broken cluster")
		}
		if strings.Contains(cs.Error, "not-a-valid-token") {
			t.Error("the token appears in the status")
		}
		for _, name := range all {
			if s, _ := reg.ClusterStatus(name); s.State != clusterset.Synced {
				t.Errorf("%s is %s (%s) while broken fails", name, s.State, s.Error)
			}
		}
		converge(ctx, t, f, pods, podsGVR, all...)
	})

	t.Run("kubeconfig edits make clusters leave and join", func(t *testing.T) {
		writeKubeconfig(t, f, kubeconfig, []string{"fleet-1", "fleet-2"}, nil)
		waitFor(t, "fleet-3 gone", func() bool { return fmt.Sprint(reg.Clusters()) == "[fleet-1 fleet-2]" })
		converge(ctx, t, f, pods, podsGVR, "fleet-1", "fleet-2")
		waitFor(t, "handler saw fleet-3's deletes", func() bool {
			got := handlerSeen.InClusters()
			for k := range got {
				if strings.HasPrefix(k, "fleet-3|") {
					return false
				}
			}
			return true
		})
		writeKubeconfig(t, f, kubeconfig, all, nil)
		waitFor(t, "fleet-3 back", func() bool { return len(reg.Clusters()) == 3 })
		if missing := reg.WaitForSync(ctx, time.Minute); missing != nil {
			t.Fatalf("after rejoin: %v", missing)
		}
		converge(ctx, t, f, pods, podsGVR, all...)
		want := groundTruth(ctx, t, f, cmGVR, all...)
		waitFor(t, "handler saw fleet-3's adds", func() bool {
			got := handlerSeen.InClusters()
			return len(diff(want, got)) == 0
		})
	})

	t.Run("rotated token restarts the cluster without duplicate adds", func(t *testing.T) {
		c, _ := f.Cluster("fleet-2")
		if err := c.Restore(ctx); err != nil { // a new token for the same identity
			t.Fatal(err)
		}
		addsBefore := map[string]int{}
		for k, n := range handlerSeen.Adds() {
			addsBefore[k] = n
		}
		writeKubeconfig(t, f, kubeconfig, all, nil)
		time.Sleep(time.Second) // the source polls every 200ms; the restart follows
		if missing := reg.WaitForSync(ctx, time.Minute); missing != nil {
			t.Fatalf("after rotation: %v", missing)
		}
		converge(ctx, t, f, cms, cmGVR, all...)
		if cs, _ := reg.ClusterStatus("fleet-2"); cs.Restarts != 1 {
			t.Errorf("fleet-2 restarts = %d, want 1: the rotation did not rebuild the stacks", cs.Restarts)
		}
		if cs, _ := reg.ClusterStatus("fleet-1"); cs.Restarts != 0 {
			t.Errorf("fleet-1 restarts = %d, want 0", cs.Restarts)
		}
		for k, n := range handlerSeen.Adds() {
			if strings.HasPrefix(k, "fleet-2|") && n != addsBefore[k] {
				t.Errorf("%s added again after the token rotation", k)
			}
		}
		if errs := handlerSeen.Problems(); len(errs) > 0 {
			t.Errorf("handler saw inconsistent events: %v", errs[:min(10, len(errs))])
		}
	})
}

func toTruth(keys []string) truth {
	out := truth{}
	for _, k := range keys {
		out[k] = ""
	}
	return out
}
