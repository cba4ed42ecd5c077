package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/client"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

const e2eConfig = `
kubeconfig:
  paths: [%q]
  include: ["fleet-*"]
resources:
  - name: pods
    indexes: [label, pod-node, image]
  - name: nodes
  - name: configmaps
  - name: widgets
indexes:
  - name: team
    cel: "object.metadata.labels['team']"
    resources: [pods]
server:
  maxPageSize: 50
  bookmarkInterval: 1s
logging:
  level: info
`

// truthPods lists every Pod of every cluster with client-go: the ground truth.
func truthPods(ctx context.Context, t *testing.T, f *fleet.Fleet) map[string]corev1.Pod {
	t.Helper()
	out := map[string]corev1.Pod{}
	for _, name := range f.Names() {
		cs, _ := f.Clientset(name)
		list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			out[name+"|"+p.Namespace+"/"+p.Name] = p
		}
	}
	return out
}

// listAll pages through a list and returns every item, failing on a key seen twice.
func listAll(ctx context.Context, t *testing.T, d *harness.Daemon, resource string, q url.Values) ([]listItem, string) {
	return listAllPaced(ctx, t, d, resource, q, 0)
}

// listAllPaced waits pause between pages, so that writes can land mid-walk.
func listAllPaced(ctx context.Context, t *testing.T, d *harness.Daemon, resource string, q url.Values, pause time.Duration) ([]listItem, string) {
	t.Helper()
	q = cloneValues(q)
	var items []listItem
	seen := map[string]bool{}
	rv := ""
	for pages := 0; ; pages++ {
		var page api.List
		code, apiErr, err := d.Get(ctx, "/multicache/v1/resources/"+resource, q, &page)
		if err != nil || code != http.StatusOK {
			t.Fatalf("list %s %v: %d %+v %v", resource, q, code, apiErr, err)
		}
		if rv == "" {
			rv = page.ResourceVersion
		}
		for _, raw := range page.Items {
			it, err := decoded(raw)
			if err != nil {
				t.Fatalf("list %s: item: %v", resource, err)
			}
			if seen[it.key()] {
				t.Fatalf("list %s %v: %s returned twice", resource, q, it.key())
			}
			seen[it.key()] = true
			items = append(items, it)
		}
		if page.Continue == "" {
			return items, rv
		}
		q.Set("continue", page.Continue)
		time.Sleep(pause)
		if pages > 10000 {
			t.Fatal("paging does not end")
		}
	}
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = append([]string(nil), v...)
	}
	return out
}

func TestDaemonOnLocalFleet(t *testing.T) {
	env := harness.Start(t, harness.Options{Timeout: 10 * time.Minute, Seed: fleet.Spec{Namespaces: 3, Nodes: 6, PodsPerNamespace: 40, ConfigMapsPerNamespace: 10,
		WidgetsPerNamespace: 4, CRDClusters: []string{"fleet-1", "fleet-2"}}})
	ctx, f := env.Ctx, env.Fleet
	cfgPath := filepath.Join(t.TempDir(), "multicache.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(e2eConfig, f.Kubeconfig())), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	d := harness.StartDaemon(t, "--config", cfgPath)
	t.Logf("daemon ready %s after start", time.Since(start).Round(time.Millisecond))
	truth := truthPods(ctx, t, f)

	t.Run("filters and paging equal ground truth", func(t *testing.T) {
		for _, tc := range []struct {
			q    url.Values
			pred func(cluster string, p corev1.Pod) bool
		}{
			{url.Values{}, func(string, corev1.Pod) bool { return true }},
			{url.Values{"cluster": {"fleet-2"}}, func(c string, _ corev1.Pod) bool { return c == "fleet-2" }},
			{url.Values{"cluster": {"fleet-1", "fleet-3"}, "namespace": {"load-1"}}, func(c string, p corev1.Pod) bool {
				return (c == "fleet-1" || c == "fleet-3") && p.Namespace == "load-1"
			}},
			{url.Values{"labelSelector": {"app in (app-1,app-2),tier!=cache"}}, func(_ string, p corev1.Pod) bool {
				return (p.Labels["app"] == "app-1" || p.Labels["app"] == "app-2") && p.Labels["tier"] != "cache"
			}},
			{url.Values{"fieldSelector": {"metadata.name=pod-7"}}, func(_ string, p corev1.Pod) bool { return p.Name == "pod-7" }},
			{url.Values{"fieldSelector": {"metadata.namespace=load-2,spec.nodeName=node-3"}}, func(_ string, p corev1.Pod) bool {
				return p.Namespace == "load-2" && p.Spec.NodeName == "node-3"
			}},
			{url.Values{"fieldSelector": {"spec.nodeName!=node-1,team=team-2"}}, func(_ string, p corev1.Pod) bool {
				return p.Spec.NodeName != "node-1" && p.Labels["team"] == "team-2"
			}},
			{url.Values{"index": {"image"}, "value": {"redis:7.4.1"}}, func(_ string, p corev1.Pod) bool {
				for _, c := range p.Spec.Containers {
					if c.Image == "redis:7.4.1" {
						return true
					}
				}
				return false
			}},
			{url.Values{"index": {"cluster-namespace"}, "value": {"fleet-3/load-0"}, "limit": {"7"}}, func(c string, p corev1.Pod) bool {
				return c == "fleet-3" && p.Namespace == "load-0"
			}},
		} {
			items, _ := listAll(ctx, t, d, "po", tc.q) // a short name, resolved by the daemon
			got := map[string]string{}
			var order []string
			for _, it := range items {
				got[it.key()] = it.Object.Metadata.UID + "/" + it.Object.Metadata.ResourceVersion
				order = append(order, fmt.Sprintf("%s\x00%s\x00%s", it.Cluster, it.Object.Metadata.Namespace, it.Object.Metadata.Name))
				if it.Object.Kind != "Pod" || it.Object.APIVersion != "v1" {
					t.Fatalf("item without kind/apiVersion: %+v", it.Object)
				}
			}
			if !sort.StringsAreSorted(order) {
				t.Errorf("%v: items not in cluster, namespace, name order", tc.q)
			}
			want := map[string]string{}
			for k, p := range truth {
				if tc.pred(strings.SplitN(k, "|", 2)[0], p) {
					want[k] = string(p.UID) + "/" + p.ResourceVersion
				}
			}
			if len(want) == 0 {
				t.Fatalf("%v: ground truth empty, the case proves nothing", tc.q)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%v: %d items, ground truth %d", tc.q, len(got), len(want))
			}
		}
	})

	t.Run("get one object, cluster-scoped and namespaced", func(t *testing.T) {
		var raw api.Item
		code, e, err := d.Get(ctx, "/multicache/v1/resources/pods/fleet-2/load-0/pod-3", nil, &raw)
		one, _ := decoded(raw)
		want := truth["fleet-2|load-0/pod-3"]
		if err != nil || code != 200 || one.Object.Metadata.UID != string(want.UID) {
			t.Errorf("get pod: %d %+v %v %+v", code, e, err, one)
		}
		code, _, err = d.Get(ctx, "/multicache/v1/resources/Node/fleet-3/_/node-2", nil, &raw)
		one, _ = decoded(raw)
		if err != nil || code != 200 || one.Object.Kind != "Node" {
			t.Errorf("get node: %d %v %+v", code, err, one)
		}
		code, e, _ = d.Get(ctx, "/multicache/v1/resources/pods/fleet-2/load-0/nope", nil, &one)
		if code != 404 || e.Reason != "NotFound" {
			t.Errorf("missing pod: %d %+v", code, e)
		}
	})

	t.Run("documented errors", func(t *testing.T) {
		for _, tc := range []struct {
			path   string
			q      url.Values
			code   int
			reason string
			says   string
		}{
			{"/multicache/v1/resources/frobs", nil, 404, "NotFound", `resource "frobs" is not cached`},
			{"/multicache/v1/resources/pods", url.Values{"labelSelector": {"a in (b"}}, 400, "BadRequest", "labelSelector"},
			{"/multicache/v1/resources/pods", url.Values{"fieldSelector": {"spec.colour=red"}}, 400, "BadRequest", `field "spec.colour"`},
			{"/multicache/v1/resources/pods", url.Values{"continue": {"not-a-token"}}, 400, "BadRequest", "continue"},
			{"/multicache/v1/resources/pods", url.Values{"limit": {"-3"}}, 400, "BadRequest", "limit"},
			{"/multicache/v1/resources/pods", url.Values{"index": {"nope"}, "value": {"x"}}, 400, "BadRequest", `index "nope"`},
			{"/multicache/v1/resources/pods", url.Values{"watch": {"true"}, "resourceVersion": {"garbage"}}, 400, "BadRequest", "resourceVersion"},
			{"/multicache/v1/resources/pods", url.Values{"watch": {"true"}, "resourceVersion": {"eyJlIjoib2xkIiwidiI6e319"}}, 410, "Expired", "earlier run"},
		} {
			code, e, err := d.Get(ctx, tc.path, tc.q, &struct{}{})
			if err != nil || code != tc.code || e == nil || e.Reason != tc.reason || !strings.Contains(e.Message, tc.says) || e.Code != tc.code {
				t.Errorf("%s %v: %d %+v %v; want %d %s mentioning %q", tc.path, tc.q, code, e, err, tc.code, tc.reason, tc.says)
			}
		}
	})

	t.Run("a CRD two clusters serve", func(t *testing.T) {
		var page api.List
		if code, e, err := d.Get(ctx, "/multicache/v1/resources/widgets", url.Values{"namespace": {"load-0"}}, &page); err != nil || code != 200 {
			t.Fatalf("%d %+v %v", code, e, err)
		}
		if len(page.Items) != 8 {
			t.Errorf("%d widgets in load-0, want 4 in each of fleet-1 and fleet-2", len(page.Items))
		}
	})

	t.Run("paging while writes go on visits every stable object once", func(t *testing.T) {
		cs, _ := f.Clientset("fleet-2")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		writes := 0
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				writes = i
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("churn-%d", i)
				_, _ = cs.CoreV1().ConfigMaps("load-1").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
				if i%2 == 1 {
					_ = cs.CoreV1().ConfigMaps("load-1").Delete(ctx, fmt.Sprintf("churn-%d", i-1), metav1.DeleteOptions{})
				}
			}
		}()
		items, _ := listAllPaced(ctx, t, d, "configmaps", url.Values{"limit": {"5"}}, 20*time.Millisecond)
		close(stop)
		wg.Wait()
		t.Logf("%d items walked in pages of 5 while %d writes landed", len(items), writes)
		if writes < 20 {
			t.Fatalf("only %d writes during the walk: the test proves nothing", writes)
		}
		seen := map[string]bool{}
		for _, it := range items {
			seen[it.key()] = true
		}
		for _, name := range f.Names() {
			c, _ := f.Clientset(name)
			list, _ := c.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
			for _, cm := range list.Items {
				if strings.HasPrefix(cm.Name, "cm-") && !seen[name+"|"+cm.Namespace+"/"+cm.Name] {
					t.Errorf("stable object %s|%s/%s not visited", name, cm.Namespace, cm.Name)
				}
			}
		}
	})

	t.Run("list then watch sees every write, no gap, no duplicate", func(t *testing.T) {
		_, rv := listAll(ctx, t, d, "configmaps", url.Values{"namespace": {"watched"}})
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		// Through the Go client, which the CLI uses too.
		cl, err := client.New(client.Options{Server: d.URL})
		if err != nil {
			t.Fatal(err)
		}
		w, err := cl.Watch(wctx, "cm", client.Query{Namespace: "watched"}, rv)
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		defer w.Close()
		type ev struct {
			Type, Cluster string
			Object        apiObject
		}
		events := make(chan ev, 10000)
		go func() {
			defer close(events)
			for {
				e, err := w.Next()
				if err != nil {
					return
				}
				var o apiObject
				_ = json.Unmarshal(e.Object, &o)
				events <- ev{e.Type, e.Cluster, o}
			}
		}()
		// Writes in every cluster: create, update, delete.
		want := map[string]bool{}
		for _, name := range f.Names() {
			cs, _ := f.Clientset(name)
			_, _ = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "watched"}}, metav1.CreateOptions{})
			for i := range 20 {
				cm, err := cs.CoreV1().ConfigMaps("watched").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%d", i)}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				want["ADDED "+name+"|watched/"+cm.Name+"@"+cm.ResourceVersion] = true
				if i%4 == 0 {
					cm.Labels = map[string]string{"touched": "yes"}
					cm, err = cs.CoreV1().ConfigMaps("watched").Update(ctx, cm, metav1.UpdateOptions{})
					if err != nil {
						t.Fatal(err)
					}
					want["MODIFIED "+name+"|watched/"+cm.Name+"@"+cm.ResourceVersion] = true
				}
				if i%5 == 0 {
					if err := cs.CoreV1().ConfigMaps("watched").Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
					want["DELETED "+name+"|watched/"+cm.Name] = true
				}
			}
		}
		got := map[string]int{}
		bookmarks := 0
		deadline := time.After(60 * time.Second)
		for missing := len(want); missing > 0; {
			select {
			case e, ok := <-events:
				if !ok {
					t.Fatal("watch ended early")
				}
				if e.Type == "BOOKMARK" {
					bookmarks++
					continue
				}
				k := e.Type + " " + e.Cluster + "|" + e.Object.Metadata.Namespace + "/" + e.Object.Metadata.Name
				if e.Type != "DELETED" {
					k += "@" + e.Object.Metadata.ResourceVersion
				}
				got[k]++
				if got[k] > 1 {
					t.Errorf("duplicate event %s", k)
				}
				if want[k] && got[k] == 1 {
					missing--
				}
			case <-deadline:
				var miss []string
				for k := range want {
					if got[k] == 0 {
						miss = append(miss, k)
					}
				}
				t.Fatalf("after 60s, %d writes not seen: %v", len(miss), miss[:min(10, len(miss))])
			}
		}
		if bookmarks == 0 {
			t.Error("no bookmark")
		}
	})

	t.Run("verify agrees with the API servers, and catches a wrong cluster", func(t *testing.T) {
		for _, res := range []string{"configmaps", "po", "widgets"} {
			out, err := exec.Command(harness.Binary(t), "verify", res, "--server", d.URL, "--config", cfgPath).CombinedOutput()
			t.Logf("verify %s:\n%s", res, out)
			if err != nil || !strings.Contains(string(out), "converged") || !strings.Contains(string(out), "fleet-3") {
				t.Errorf("verify %s: %v\n%s", res, err, out)
			}
		}
		// The same contexts with fleet-1 and fleet-2 pointing at each other's API servers: the
		// daemon's fleet-1 is not what this "fleet-1" lists.
		kc, err := clientcmd.LoadFromFile(f.Kubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		kc.Contexts["fleet-1"].Cluster, kc.Contexts["fleet-2"].Cluster = kc.Contexts["fleet-2"].Cluster, kc.Contexts["fleet-1"].Cluster
		kc.Contexts["fleet-1"].AuthInfo, kc.Contexts["fleet-2"].AuthInfo = kc.Contexts["fleet-2"].AuthInfo, kc.Contexts["fleet-1"].AuthInfo
		swapped := filepath.Join(t.TempDir(), "swapped")
		if err := clientcmd.WriteToFile(*kc, swapped); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(harness.Binary(t), "verify", "configmaps", "--server", d.URL, "--kubeconfig", swapped, "--context", "fleet-1", "--timeout", "2s").CombinedOutput()
		t.Logf("verify against swapped clusters:\n%s", out)
		if err == nil || !strings.Contains(string(out), "diverged") || !strings.Contains(string(out), "fleet-1") {
			t.Errorf("verify against swapped clusters: %v\n%s", err, out)
		}
	})

	t.Run("CLI table and json", func(t *testing.T) {
		run := func(args ...string) string {
			out, err := exec.Command(harness.Binary(t), append(args, "--server", d.URL)...).CombinedOutput()
			if err != nil {
				t.Fatalf("multicache %v: %v\n%s", args, err, out)
			}
			return string(out)
		}
		out := run("get", "pods", "-n", "load-0", "--cluster", "fleet-2", "-l", "app=app-3")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if !strings.HasPrefix(lines[0], "CLUSTER") || !strings.Contains(lines[0], "NAMESPACE") || !strings.Contains(lines[0], "NODE") {
			t.Errorf("table header: %q", lines[0])
		}
		var want []string
		for k, p := range truth {
			if strings.HasPrefix(k, "fleet-2|load-0/") && p.Labels["app"] == "app-3" {
				want = append(want, p.Name)
			}
		}
		var got []string
		for _, l := range lines[1:] {
			fields := strings.Fields(l)
			if fields[0] != "fleet-2" || fields[1] != "load-0" {
				t.Errorf("row %q", l)
			}
			got = append(got, fields[2])
		}
		sort.Strings(want)
		sort.Strings(got)
		if fmt.Sprint(got) != fmt.Sprint(want) || len(want) == 0 {
			t.Errorf("table rows %v, want %v", got, want)
		}
		var js struct {
			Items []listItem `json:"items"`
		}
		if err := json.Unmarshal([]byte(run("get", "nodes", "--cluster", "fleet-1", "-o", "json")), &js); err != nil {
			t.Fatal(err)
		}
		if len(js.Items) != 6 || js.Items[0].Object.Kind != "Node" {
			t.Errorf("json: %d nodes", len(js.Items))
		}
		// A resource named version/resource (one path segment once escaped) reaches the daemon.
		if err := json.Unmarshal([]byte(run("get", "v1/nodes", "--cluster", "fleet-1", "-o", "json")), &js); err != nil || len(js.Items) != 6 {
			t.Errorf("get v1/nodes: %v, %d nodes", err, len(js.Items))
		}
		if out := run("clusters"); strings.Count(out, "Synced") < 3 {
			t.Errorf("clusters:\n%s", out)
		}
		sel := labels.SelectorFromSet(labels.Set{"app": "app-3"})
		_ = sel
	})

	var oldToken string
	t.Run("a token from this run resumes", func(t *testing.T) {
		_, oldToken = listAll(ctx, t, d, "pods", url.Values{"namespace": {"load-0"}})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+"/multicache/v1/resources/pods?watch=true&resourceVersion="+url.QueryEscape(oldToken), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("resume: %v %v", err, resp)
		}
		resp.Body.Close()
	})

	t.Run("SIGTERM shuts down cleanly with a watch open", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+"/multicache/v1/resources/pods?watch=true", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		t0 := time.Now()
		if err := d.Stop(t); err != nil {
			t.Errorf("exit: %v", err)
		}
		t.Logf("daemon stopped %s after SIGTERM", time.Since(t0).Round(time.Millisecond))
	})

	t.Run("after a daemon restart an old token is expired, never a silent gap", func(t *testing.T) {
		t0 := time.Now()
		d2 := harness.StartDaemon(t, "--config", cfgPath)
		t.Logf("restarted daemon resynced and ready in %s", time.Since(t0).Round(time.Millisecond))
		code, e, err := d2.Get(ctx, "/multicache/v1/resources/pods", url.Values{"watch": {"true"}, "resourceVersion": {oldToken}}, &struct{}{})
		if err != nil || code != http.StatusGone || e.Reason != "Expired" || !strings.Contains(e.Message, "earlier run") {
			t.Errorf("old token after restart: %d %+v %v", code, e, err)
		}
		items, _ := listAll(ctx, t, d2, "pods", url.Values{})
		if len(items) != len(truth) {
			t.Errorf("restarted daemon lists %d pods, servers %d", len(items), len(truth))
		}
	})
}

func TestBadInputsAtStartup(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(bad, []byte("resources: [{name: pods, indexes: [nope]}]\nserver: {listen: '0.0.0.0:9'}\n"), 0o600)
	out, err := exec.Command(harness.Binary(t), "serve", "--config", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "resources[0].indexes[0]") || !strings.Contains(string(out), "server.listen") {
		t.Errorf("bad config: %v\n%s", err, out)
	}
	out, err = exec.Command(harness.Binary(t), "serve", "--resource", "pods", "--kubeconfig", filepath.Join(dir, "missing")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "missing") {
		t.Errorf("missing kubeconfig: %v\n%s", err, out)
	}
}

func TestAuth(t *testing.T) {
	env := harness.Start(t, harness.Options{Clusters: 1})
	ctx, f := env.Ctx, env.Fleet
	tokens := filepath.Join(t.TempDir(), "tokens")
	_ = os.WriteFile(tokens, []byte("# readers\ns3cret-token\n"), 0o600)
	d := harness.StartDaemon(t, "--kubeconfig", f.Kubeconfig(), "--resource", "namespaces", "--token-file", tokens)
	var out map[string]any
	for _, tc := range []struct {
		token string
		code  int
	}{{"", 401}, {"wrong", 401}, {"s3cret-token", 200}} {
		d.Token = tc.token
		code, e, err := d.Get(ctx, "/multicache/v1/clusters", nil, &out)
		if err != nil || code != tc.code {
			t.Errorf("token %q: %d %+v %v", tc.token, code, e, err)
		}
		if code == 401 && (e == nil || e.Reason != "Unauthorized") {
			t.Errorf("token %q: body %+v", tc.token, e)
		}
	}
	// kubectl's --token, against the Kubernetes API; kubectl sends tokens over TLS only.
	dir := t.TempDir()
	caPath, certPath, keyPath := selfSignedCA(t, dir)
	cfg := filepath.Join(dir, "multicache.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("server:\n  tls: {certFile: %q, keyFile: %q}\n", certPath, keyPath)), 0o600); err != nil {
		t.Fatal(err)
	}
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	tlsd := harness.StartDaemonAt(t, "https", insecure, harness.FreePort(t), "--config", cfg, "--kubeconfig", f.Kubeconfig(), "--resource", "namespaces", "--token-file", tokens)
	k := newKubectl(t, "--server", tlsd.URL, "--certificate-authority", caPath)
	// Without any credential kubectl prompts for a username on stdin, so the refusal is shown with a wrong token.
	if _, errs, ok := k.run("--token", "wrong-token", "get", "namespaces"); ok || !strings.Contains(errs, "You must be logged in to the server") {
		t.Errorf("kubectl with a wrong token: ok=%t %q", ok, errs)
	}
	if out := k.ok("--token", "s3cret-token", "get", "namespaces", "default", "-o", "name"); strings.TrimSpace(out) != "namespace/default" {
		t.Errorf("kubectl --token: %q", out)
	}
	b, _ := os.ReadFile(d.Log)
	if strings.Contains(string(b), "s3cret-token") || strings.Contains(string(b), f.Clusters[0].Token) {
		t.Error("a credential appears in the daemon's log")
	}
}
