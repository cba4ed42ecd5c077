package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

const kubectlConfig = `
kubeconfig:
  paths: [%q]
  include: ["fleet-*"]
resources:
  - name: pods
    indexes: [label, pod-node]
  - name: nodes
  - name: deployments.apps
  - name: widgets
  - name: namespaces
    mode: metadata
  - name: events
server:
  maxPageSize: 50
  bookmarkInterval: 1s
`

// kubectl runs the kubectl that `make tools` builds.
type kubectl struct {
	t    *testing.T
	bin  string
	args []string // before every command: --server, --kubeconfig, --token
}

func newKubectl(t *testing.T, args ...string) kubectl {
	bin := filepath.Join(fleet.DefaultBinDir(), "kubectl")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kubectl: %v (make tools builds it)", err)
	}
	return kubectl{t: t, bin: bin, args: args}
}

// run returns stdout and stderr, and whether kubectl exited 0.
func (k kubectl) run(args ...string) (string, string, bool) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.bin, append(append([]string{}, k.args...), args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=/dev/null", "HOME="+k.t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err == nil
}

// ok runs and fails the test unless kubectl exits 0.
func (k kubectl) ok(args ...string) string {
	k.t.Helper()
	out, errs, ok := k.run(args...)
	if !ok {
		k.t.Fatalf("kubectl %s: %s", strings.Join(args, " "), errs)
	}
	return out
}

// table is kubectl's tabular output: the header's column names and each row's cells (no cell
// in these tests contains a space).
type table struct {
	header []string
	rows   [][]string
}

func parseTable(out string) table {
	var t table
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || lines[0] == "" {
		return t
	}
	// Header names may hold one space ("NOMINATED NODE"): split on runs of 2+ spaces.
	for _, h := range strings.Split(lines[0], "  ") {
		if h = strings.TrimSpace(h); h != "" {
			t.header = append(t.header, h)
		}
	}
	for _, l := range lines[1:] {
		t.rows = append(t.rows, strings.Fields(l))
	}
	return t
}

// col returns the index of column name, failing when absent.
func (tb table) col(t *testing.T, name string) int {
	t.Helper()
	i := slices.Index(tb.header, name)
	if i < 0 {
		t.Fatalf("no column %s in %v", name, tb.header)
	}
	return i
}

// keys returns cluster|namespace/name of every row (namespace "" without a NAMESPACE column).
func (tb table) keys(t *testing.T) []string {
	t.Helper()
	c, n := tb.col(t, "CLUSTER"), tb.col(t, "NAME")
	ns := slices.Index(tb.header, "NAMESPACE")
	var out []string
	for _, r := range tb.rows {
		k := r[c] + "|"
		if ns >= 0 {
			k += r[ns] + "/"
		}
		out = append(out, k+r[n])
	}
	sort.Strings(out)
	return out
}

// podKeys returns the sorted keys of the truth's pods that keep accepts.
func podKeys(truth map[string]corev1.Pod, withNamespace bool, keep func(cluster string, p corev1.Pod) bool) []string {
	var out []string
	for k, p := range truth {
		cluster := strings.SplitN(k, "|", 2)[0]
		if keep(cluster, p) {
			if withNamespace {
				out = append(out, k)
			} else {
				out = append(out, cluster+"|"+p.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestKubectl: the real kubectl against the daemon, in the fleet view and in one cluster's,
// every answer compared with what the API servers list.
func TestKubectl(t *testing.T) {
	env := harness.Start(t, harness.Options{Timeout: 10 * time.Minute, Seed: fleet.Spec{Namespaces: 2, Nodes: 3, PodsPerNamespace: 12, DeploymentsPerNamespace: 2,
		WidgetsPerNamespace: 3, CRDClusters: []string{"fleet-1", "fleet-2"}}})
	ctx, f := env.Ctx, env.Fleet
	cfgPath := filepath.Join(t.TempDir(), "multicache.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(kubectlConfig, f.Kubeconfig())), 0o600); err != nil {
		t.Fatal(err)
	}
	d := harness.StartDaemon(t, "--config", cfgPath)
	k := newKubectl(t, "--server", d.URL)
	truth := truthPods(ctx, t, f)
	all := func(string, corev1.Pod) bool { return true }

	t.Run("get -A, -n, -l and --field-selector equal the API servers", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			keep func(string, corev1.Pod) bool
		}{
			{[]string{"-A"}, all},
			{[]string{"-n", "load-1"}, func(_ string, p corev1.Pod) bool { return p.Namespace == "load-1" }},
			{[]string{"-A", "-l", "app in (app-1,app-2),tier!=cache"}, func(_ string, p corev1.Pod) bool {
				return (p.Labels["app"] == "app-1" || p.Labels["app"] == "app-2") && p.Labels["tier"] != "cache"
			}},
			{[]string{"-A", "-l", "multicache.io/cluster=fleet-2"}, func(c string, _ corev1.Pod) bool { return c == "fleet-2" }},
			{[]string{"-A", "-l", "multicache.io/cluster!=fleet-2"}, func(c string, _ corev1.Pod) bool { return c != "fleet-2" }},
			{[]string{"-n", "load-0", "-l", "multicache.io/cluster in (fleet-1,fleet-3),tier=frontend"}, func(c string, p corev1.Pod) bool {
				return (c == "fleet-1" || c == "fleet-3") && p.Namespace == "load-0" && p.Labels["tier"] == "frontend"
			}},
			{[]string{"-A", "-l", "multicache.io/cluster notin (fleet-1)"}, func(c string, _ corev1.Pod) bool { return c != "fleet-1" }},
			{[]string{"-A", "--field-selector", "spec.nodeName=node-1"}, func(_ string, p corev1.Pod) bool { return p.Spec.NodeName == "node-1" }},
		} {
			tb := parseTable(k.ok(append([]string{"get", "pods"}, tc.args...)...))
			if tb.header[0] != "NAMESPACE" && tb.header[0] != "CLUSTER" || !slices.Contains(tb.header, "READY") {
				t.Errorf("%v: header %v: want CLUSTER first (after kubectl's NAMESPACE) and the Pod columns", tc.args, tb.header)
			}
			want := podKeys(truth, tc.args[0] == "-A", tc.keep)
			if len(want) == 0 {
				t.Fatalf("%v: ground truth empty, the case proves nothing", tc.args)
			}
			if got := tb.keys(t); !slices.Equal(got, want) {
				t.Errorf("kubectl get pods %v: %d rows, the API servers list %d", tc.args, len(got), len(want))
			}
		}
	})

	t.Run("-o wide, json, yaml and name", func(t *testing.T) {
		tb := parseTable(k.ok("get", "pods", "-A", "-o", "wide"))
		node := tb.col(t, "NODE")
		for _, r := range tb.rows {
			want := truth[r[tb.col(t, "CLUSTER")]+"|"+r[0]+"/"+r[tb.col(t, "NAME")]]
			if r[node] != want.Spec.NodeName {
				t.Fatalf("-o wide: row %v: NODE %s, the API server says %s", r, r[node], want.Spec.NodeName)
			}
		}
		var list struct {
			Kind  string       `json:"kind"`
			Items []corev1.Pod `json:"items"`
		}
		if err := json.Unmarshal([]byte(k.ok("get", "pods", "-A", "-o", "json")), &list); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, p := range list.Items {
			got[p.Annotations["multicache.io/cluster"]+"|"+p.Namespace+"/"+p.Name] = string(p.UID)
		}
		if list.Kind != "List" || len(got) != len(truth) {
			t.Errorf("-o json: kind %s, %d distinct cluster|namespace/name, want %d", list.Kind, len(got), len(truth))
		}
		for key, p := range truth {
			if got[key] != string(p.UID) {
				t.Fatalf("-o json: %s: uid %q, the API server says %q", key, got[key], p.UID)
			}
		}
		if y := k.ok("get", "pods", "-n", "load-0", "-l", "multicache.io/cluster=fleet-3", "-o", "yaml"); !strings.Contains(y, "multicache.io/cluster: fleet-3") || strings.Contains(y, "fleet-1") {
			t.Errorf("-o yaml of fleet-3's pods: no cluster annotation, or another cluster's")
		}
		names := strings.Fields(k.ok("get", "pods", "-n", "load-1", "-l", "multicache.io/cluster=fleet-1", "-o", "name"))
		if want := podKeys(truth, false, func(c string, p corev1.Pod) bool { return c == "fleet-1" && p.Namespace == "load-1" }); len(names) != len(want) || !strings.HasPrefix(names[0], "pod/") {
			t.Errorf("-o name: %d names (%v), want %d", len(names), names[:min(3, len(names))], len(want))
		}
	})

	t.Run("get NAME: one cluster, several clusters", func(t *testing.T) {
		cs, _ := f.Clientset("fleet-3")
		if _, err := cs.CoreV1().Pods("load-0").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "only-here"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var pod corev1.Pod
		harness.WaitFor(t, "only-here served", 30*time.Second, func() bool {
			out, _, ok := k.run("get", "pod", "only-here", "-n", "load-0", "-o", "json")
			return ok && json.Unmarshal([]byte(out), &pod) == nil
		})
		if pod.Annotations["multicache.io/cluster"] != "fleet-3" || pod.Kind != "Pod" {
			t.Errorf("get one: annotation %q kind %q", pod.Annotations["multicache.io/cluster"], pod.Kind)
		}
		tb := parseTable(k.ok("get", "pod", "pod-3", "-n", "load-1"))
		if got := tb.keys(t); !slices.Equal(got, []string{"fleet-1|pod-3", "fleet-2|pod-3", "fleet-3|pod-3"}) {
			t.Errorf("get pod-3 as a table: rows %v, want one per cluster", got)
		}
		_, errs, ok := k.run("get", "pod", "pod-3", "-n", "load-1", "-o", "json")
		if ok || !strings.Contains(errs, "Error from server (Conflict)") || !strings.Contains(errs, "/clusters/fleet-2/api/v1/namespaces/load-1/pods/pod-3") {
			t.Errorf("get pod-3 -o json: ok=%t, stderr %q: want a Conflict naming the paths", ok, errs)
		}
		if _, errs, ok := k.run("get", "pod", "nowhere", "-n", "load-1"); ok || !strings.Contains(errs, `Error from server (NotFound): pods "nowhere" not found`) {
			t.Errorf("get a missing pod: ok=%t, stderr %q", ok, errs)
		}
	})

	t.Run("api-resources", func(t *testing.T) {
		out := k.ok("api-resources")
		for _, want := range [][]string{
			{"pods", "po", "v1", "true", "Pod"},
			{"nodes", "no", "v1", "false", "Node"},
			{"deployments", "deploy", "apps/v1", "true", "Deployment"},
			{"widgets", "wd", "example.multicache.io/v1", "true", "Widget"},
			{"clusters", "multicache.io/v1", "false", "Cluster"},
		} {
			if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool { return slices.Equal(strings.Fields(l), want) }) {
				t.Errorf("api-resources: no line %v in\n%s", want, out)
			}
		}
		// Short names and categories resolve as they do against an API server.
		sel := []string{"-n", "load-0", "-l", "multicache.io/cluster=fleet-1", "-o", "name"}
		pods := k.ok(append([]string{"get", "pods"}, sel...)...)
		if po := k.ok(append([]string{"get", "po"}, sel...)...); po != pods || !strings.Contains(pods, "pod/") {
			t.Errorf("get po: %q, get pods: %q", po, pods)
		}
		all := k.ok(append([]string{"get", "all"}, sel...)...)
		for _, want := range []string{"pod/", "deployment.apps/"} {
			if !strings.Contains(all, want) {
				t.Errorf("get all (the category): no %s in %q", want, all)
			}
		}
	})

	t.Run("auth can-i and auth whoami", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			yes  bool
		}{
			{[]string{"list", "pods"}, true},
			{[]string{"watch", "pods", "-A"}, true},
			{[]string{"get", "deployments.apps", "-n", "load-0"}, true},
			{[]string{"list", "widgets"}, true},
			{[]string{"create", "pods"}, false},
			{[]string{"delete", "deployments.apps"}, false},
			{[]string{"get", "pods", "--subresource", "log"}, false},
			{[]string{"list", "secrets"}, false}, // not cached here
		} {
			out, errs, ok := k.run(append([]string{"auth", "can-i"}, tc.args...)...)
			want := "no"
			if tc.yes {
				want = "yes"
			}
			// kubectl prints "no - <the reason>" when the review gives one.
			if answer, _, _ := strings.Cut(strings.TrimSpace(out), " "); answer != want || ok != tc.yes {
				t.Errorf("kubectl auth can-i %v: %q (exit 0: %t), stderr %q; want %s", tc.args, out, ok, errs, want)
			}
		}
		// In one cluster's view: fleet-3 does not serve widgets.
		one := newKubectl(t, "--server", d.URL+"/clusters/fleet-3")
		if out, _, ok := one.run("auth", "can-i", "list", "pods"); !ok || strings.TrimSpace(out) != "yes" {
			t.Errorf("fleet-3: can-i list pods: %q", out)
		}
		if out, _, ok := one.run("auth", "can-i", "list", "widgets.example.multicache.io"); ok || !strings.HasPrefix(out, "no - ") || !strings.Contains(out, "not cached") {
			t.Errorf("fleet-3: can-i list widgets: %q, want no", out)
		}
		// No auth configured: the caller is anonymous, as kube-apiserver would name it.
		if out := k.ok("auth", "whoami"); !strings.Contains(out, "system:anonymous") || !strings.Contains(out, "system:unauthenticated") {
			t.Errorf("kubectl auth whoami:\n%s", out)
		}
	})

	t.Run("explain: OpenAPI v3 and v2 read from the members", func(t *testing.T) {
		for args, want := range map[string][]string{
			"pods":                      {"KIND:", "Pod", "VERSION:", "v1", "spec"},
			"deployments.spec.replicas": {"FIELD: replicas", "integer"},
			"widgets":                   {"KIND:", "Widget", "example.multicache.io"},
		} {
			out := k.ok(append([]string{"explain"}, strings.Fields(args)...)...)
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("kubectl explain %s: no %q in\n%s", args, w, out)
				}
			}
		}
		// fleet-3 does not serve widgets: its view has no such resource.
		if _, errs, ok := newKubectl(t, "--server", d.URL+"/clusters/fleet-3").run("explain", "widgets"); ok {
			t.Errorf("explain widgets in fleet-3's view: succeeded (stderr %q)", errs)
		}
		// Every document says where it comes from and what the cluster annotation is.
		resp, err := http.Get(d.URL + "/openapi/v3")
		if err != nil {
			t.Fatal(err)
		}
		var index struct {
			Paths map[string]struct {
				ServerRelativeURL string `json:"serverRelativeURL"`
			} `json:"paths"`
		}
		err = json.NewDecoder(resp.Body).Decode(&index)
		resp.Body.Close()
		if err != nil || index.Paths["api/v1"].ServerRelativeURL == "" || index.Paths["apis/example.multicache.io/v1"].ServerRelativeURL == "" {
			t.Fatalf("/openapi/v3: %v %+v", err, index)
		}
		resp, err = http.Get(d.URL + index.Paths["api/v1"].ServerRelativeURL)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Info struct {
				Description string `json:"description"`
			} `json:"info"`
		}
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if err != nil || !strings.Contains(doc.Info.Description, "multicache.io/cluster") {
			t.Errorf("/openapi/v3/api/v1: info.description %q (%v)", doc.Info.Description, err)
		}

		// OpenAPI v2: one document merged from the members' own, read by kubectl's v2 explain.
		for args, want := range map[string][]string{
			"pods":                      {"KIND:", "Pod", "VERSION:", "v1", "spec"},
			"deployments.spec.replicas": {"FIELD:", "replicas", "integer"},
			"widgets":                   {"KIND:", "Widget", "example.multicache.io"},
		} {
			out := k.ok(append([]string{"explain", "--output=plaintext-openapiv2"}, strings.Fields(args)...)...)
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("kubectl explain --output=plaintext-openapiv2 %s: no %q in\n%s", args, w, out)
				}
			}
		}
		if _, errs, ok := newKubectl(t, "--server", d.URL+"/clusters/fleet-3").run("explain", "--output=plaintext-openapiv2", "widgets"); ok {
			t.Errorf("explain (v2) widgets in fleet-3's view: succeeded (stderr %q)", errs)
		}
		var v2 struct {
			Swagger string `json:"swagger"`
			Info    struct {
				Description string `json:"description"`
			} `json:"info"`
			Paths map[string]json.RawMessage `json:"paths"`
		}
		resp, err = http.Get(d.URL + "/clusters/fleet-3/openapi/v2")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&v2)
		resp.Body.Close()
		if err != nil || v2.Swagger != "2.0" || !strings.Contains(v2.Info.Description, "multicache.io/cluster") || v2.Paths["/api/v1/pods"] == nil {
			t.Errorf("/clusters/fleet-3/openapi/v2: %v, swagger %q, description %q, %d paths", err, v2.Swagger, v2.Info.Description, len(v2.Paths))
		}
		for p := range v2.Paths {
			if strings.HasPrefix(p, "/apis/example.multicache.io/") || strings.HasPrefix(p, "/apis/rbac.authorization.k8s.io/") {
				t.Errorf("/clusters/fleet-3/openapi/v2: path %s of a group-version the view does not serve", p)
			}
		}
	})

	t.Run("events across the fleet: get events -A --sort-by, kubectl events -A", func(t *testing.T) {
		base := time.Now().Add(-time.Hour).Truncate(time.Second)
		var want []string // event names, oldest last-seen first
		for i, c := range []string{"fleet-3", "fleet-1", "fleet-2"} {
			cs, err := f.Clientset(c)
			if err != nil {
				t.Fatal(err)
			}
			name := "e2e-event-" + c
			ts := metav1.NewTime(base.Add(time.Duration(i) * time.Minute))
			if _, err := cs.CoreV1().Events("load-0").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "load-0", Name: "pod-1", APIVersion: "v1"},
				Reason:         "E2EReason" + strconv.Itoa(i), Message: "happened in " + c, Type: "Normal", Source: corev1.EventSource{Component: "e2e"},
				FirstTimestamp: ts, LastTimestamp: ts, Count: 1}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			want = append(want, name)
		}
		var got []string
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			out := k.ok("get", "events", "-A", "--sort-by=.lastTimestamp", "-o", `jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}`)
			got = slices.DeleteFunc(strings.Fields(out), func(n string) bool { return !strings.HasPrefix(n, "e2e-event-") })
			if len(got) == len(want) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if !slices.Equal(got, want) {
			t.Errorf("kubectl get events -A --sort-by=.lastTimestamp: %v, want %v", got, want)
		}
		tb := parseTable(k.ok("get", "events", "-A"))
		if tb.header[1] != "CLUSTER" {
			t.Errorf("get events -A: header %v, want CLUSTER after NAMESPACE", tb.header)
		}
		out := k.ok("events", "-A")
		for i, c := range []string{"fleet-3", "fleet-1", "fleet-2"} {
			if !strings.Contains(out, "E2EReason"+strconv.Itoa(i)) || !strings.Contains(out, "happened in "+c) {
				t.Errorf("kubectl events -A: no event of %s in\n%s", c, out)
			}
		}
	})

	t.Run("a CRD served by 2 of 3 clusters, with its printer columns", func(t *testing.T) {
		tb := parseTable(k.ok("get", "widgets", "-A", "-o", "wide"))
		if want := []string{"NAMESPACE", "CLUSTER", "NAME", "COLOR", "SIZE", "AGE"}; !slices.Equal(tb.header, want) {
			t.Errorf("widgets -o wide: header %v, want %v", tb.header, want)
		}
		clusters := map[string]int{}
		for _, r := range tb.rows {
			clusters[r[1]]++
		}
		if len(tb.rows) != 2*2*3 || clusters["fleet-3"] != 0 {
			t.Errorf("widgets: %d rows by cluster %v, want 12 from fleet-1 and fleet-2", len(tb.rows), clusters)
		}
		if tb := parseTable(k.ok("get", "widgets", "-A")); slices.Contains(tb.header, "SIZE") {
			t.Errorf("widgets without -o wide: header %v shows the priority-1 column", tb.header)
		}
	})

	t.Run("one cluster through a kubeconfig", func(t *testing.T) {
		kc := filepath.Join(t.TempDir(), "kubeconfig")
		cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: fleet-2\n  cluster:\n    server: %s/clusters/fleet-2\ncontexts:\n- name: fleet-2\n  context:\n    cluster: fleet-2\ncurrent-context: fleet-2\n", d.URL)
		if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		one := newKubectl(t, "--kubeconfig", kc)
		tb := parseTable(one.ok("get", "pods", "-A"))
		if want := podKeys(truth, true, func(c string, _ corev1.Pod) bool { return c == "fleet-2" }); !slices.Equal(tb.keys(t), want) {
			t.Errorf("/clusters/fleet-2: %d rows, the API server lists %d", len(tb.rows), len(want))
		}
		if out := one.ok("get", "pod", "pod-3", "-n", "load-1", "-o", "name"); strings.TrimSpace(out) != "pod/pod-3" {
			t.Errorf("/clusters/fleet-2: get pod-3: %q", out)
		}
		kc3 := strings.ReplaceAll(cfg, "fleet-2", "fleet-3")
		if err := os.WriteFile(kc, []byte(kc3), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, errs, ok := one.run("get", "widgets", "-A"); ok || !strings.Contains(errs, `the server doesn't have a resource type "widgets"`) {
			t.Errorf("/clusters/fleet-3 lacks the CRD: ok=%t, stderr %q", ok, errs)
		}
	})

	t.Run("errors as kubectl prints them", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"get", "pods", "-A", "-l", "app in (x"}, "Error from server (BadRequest)"},
			{[]string{"get", "pods", "-A", "--field-selector", "spec.serviceAccountName=x"}, "Error from server (BadRequest)"},
			{[]string{"get", "foos"}, `error: the server doesn't have a resource type "foos"`},
			{[]string{"delete", "pod", "pod-1", "-n", "load-0"}, "Error from server (MethodNotAllowed)"},
			{[]string{"create", "namespace", "x"}, "Error from server (MethodNotAllowed)"},
			{[]string{"label", "pod", "only-here", "-n", "load-0", "x=y"}, "Error from server (MethodNotAllowed)"},
		} {
			_, errs, ok := k.run(tc.args...)
			if ok || !strings.Contains(errs, tc.want) {
				t.Errorf("kubectl %s: ok=%t, stderr %q, want %q", strings.Join(tc.args, " "), ok, errs, tc.want)
			}
		}
	})

	t.Run("clusters.multicache.io", func(t *testing.T) {
		tb := parseTable(k.ok("get", "clusters.multicache.io"))
		if want := []string{"CLUSTER", "STATE", "SYNCED", "OBJECTS", "PROGRESS", "LAST-SYNC", "ERROR"}; !slices.Equal(tb.header, want) {
			t.Errorf("clusters: header %v, want %v", tb.header, want)
		}
		for i, r := range tb.rows {
			if r[0] != f.Names()[i] || r[1] != "Synced" || r[2] != "6/6" {
				t.Errorf("clusters: row %v", r)
			}
		}
		if len(tb.rows) != 3 {
			t.Errorf("clusters: %d rows", len(tb.rows))
		}
		if out := k.ok("get", "clusters.multicache.io", "fleet-2", "-o", "name"); strings.TrimSpace(out) != "cluster.multicache.io/fleet-2" {
			t.Errorf("get one cluster: %q", out)
		}
	})

	t.Run("Pod and Node rows equal the API servers' own", func(t *testing.T) {
		setStatuses(ctx, t, f)
		for _, path := range []string{"/api/v1/pods", "/api/v1/nodes"} {
			var ours metav1.Table
			harness.WaitFor(t, "statuses served", 30*time.Second, func() bool {
				ours = tableAt(ctx, t, d.URL+path, nil)
				for _, r := range ours.Rows {
					if slices.Contains(r.Cells, any("Running")) || slices.Contains(r.Cells, any("Ready")) {
						return true
					}
				}
				return false
			})
			if ours.ColumnDefinitions[0].Name != "Cluster" {
				t.Fatalf("%s: first column %q", path, ours.ColumnDefinitions[0].Name)
			}
			age := slices.IndexFunc(ours.ColumnDefinitions, func(c metav1.TableColumnDefinition) bool { return c.Name == "Age" })
			byKey := map[string][]any{}
			for _, r := range ours.Rows {
				m := rowMeta(t, r)
				byKey[r.Cells[0].(string)+"|"+m.Namespace+"/"+m.Name] = r.Cells[1:]
			}
			compared := 0
			for _, c := range f.Names() {
				cl, _ := f.Cluster(c)
				theirs := tableAt(ctx, t, cl.URL()+path, cl.AdminConfig())
				if !reflect.DeepEqual(ours.ColumnDefinitions[1:], theirs.ColumnDefinitions) {
					t.Errorf("%s: columns differ from %s's:\n ours %+v\n its  %+v", path, c, ours.ColumnDefinitions[1:], theirs.ColumnDefinitions)
				}
				for _, r := range theirs.Rows {
					m := rowMeta(t, r)
					got, ok := byKey[c+"|"+m.Namespace+"/"+m.Name]
					if !ok {
						t.Errorf("%s: %s/%s of %s: no row", path, m.Namespace, m.Name, c)
						continue
					}
					want := slices.Clone(r.Cells)
					got = slices.Clone(got)
					if age > 0 {
						// Age is the time since creation when each server answered.
						want[age-1], got[age-1] = nil, nil
					}
					if !reflect.DeepEqual(got, want) {
						t.Errorf("%s: %s/%s of %s: cells %v, the API server's %v", path, m.Namespace, m.Name, c, got, want)
					}
					compared++
				}
			}
			if compared != len(ours.Rows) || compared == 0 {
				t.Errorf("%s: compared %d rows, the daemon served %d", path, compared, len(ours.Rows))
			}
		}
	})

	t.Run("get -w across clusters", func(t *testing.T) {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(wctx, k.bin, "--server", d.URL, "get", "pods", "-A", "-w", "-l", "run=watch")
		cmd.Env = append(os.Environ(), "KUBECONFIG=/dev/null", "HOME="+t.TempDir())
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		lines := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		time.Sleep(2 * time.Second) // the watch is open (its list is empty)
		for _, c := range f.Names() {
			cs, _ := f.Clientset(c)
			if _, err := cs.CoreV1().Pods("load-0").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "watched-" + c, Labels: map[string]string{"run": "watch"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[string]bool{}
		for len(seen) < 3 {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("kubectl get -w ended: %s", errb.String())
				}
				if fs := strings.Fields(l); len(fs) > 2 && fs[2] == "watched-"+fs[1] {
					seen[fs[1]] = true
				}
			case <-wctx.Done():
				t.Fatalf("kubectl get -w showed %v of 3 clusters' new pods; stderr %s", seen, errb.String())
			}
		}
	})

	// After the Pod rows: port-forward wants a running Pod (setStatuses runs load-0's pod-0).
	t.Run("logs, exec, port-forward and top: a clear refusal, at once", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			// In the fleet view kubectl reads the Pod first: it names the clusters to ask.
			{[]string{"logs", "pod-3", "-n", "load-1"}, "exists in 3 clusters"},
			{[]string{"--server", d.URL + "/clusters/fleet-2", "logs", "pod-3", "-n", "load-1"}, `subresource "log" of pods is not served`},
			{[]string{"--server", d.URL + "/clusters/fleet-2", "exec", "pod-3", "-n", "load-1", "--", "true"}, "post is not supported on pods/exec"},
			{[]string{"--server", d.URL + "/clusters/fleet-2", "port-forward", "pod/pod-0", "-n", "load-0", "18080:80"}, "post is not supported on pods/portforward"},
			{[]string{"top", "pods", "-A"}, "Metrics API not available"},
			{[]string{"--server", d.URL + "/clusters/fleet-2", "top", "nodes"}, "Metrics API not available"},
		} {
			start := time.Now()
			_, errs, ok := k.run(tc.args...)
			if ok || !strings.Contains(errs, tc.want) {
				t.Errorf("kubectl %s: ok=%t, stderr %q, want %q", strings.Join(tc.args, " "), ok, errs, tc.want)
			}
			t.Logf("kubectl %s: refused in %v: %s", strings.Join(tc.args, " "), time.Since(start).Round(time.Millisecond), strings.TrimSpace(errs))
		}
	})

	t.Run("a failing cluster: kubectl prints a warning, the others answer", func(t *testing.T) {
		cl, _ := f.Cluster("fleet-3")
		if err := cl.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := cl.StartAPIServer(ctx); err != nil {
				t.Error(err)
			}
		}()
		var out, errs string
		harness.WaitFor(t, "a warning for fleet-3", time.Minute, func() bool {
			var ok bool
			out, errs, ok = k.run("get", "pods", "-A")
			return ok && strings.Contains(errs, `Warning: cluster "fleet-3"`)
		})
		byCluster := map[string]int{}
		for _, k := range parseTable(out).keys(t) {
			byCluster[strings.SplitN(k, "|", 2)[0]]++
		}
		if len(byCluster) != 3 || byCluster["fleet-3"] < len(podKeys(truth, true, func(c string, _ corev1.Pod) bool { return c == "fleet-3" })) {
			t.Errorf("with fleet-3 down: rows by cluster %v: want fleet-3's last state beside the others'", byCluster)
		}
	})

	// Last: it installs the CRD in fleet-3.
	t.Run("customresourcedefinitions: one entry per definition, with its clusters; a watch sees a cluster join", func(t *testing.T) {
		const name = "widgets.example.multicache.io"
		tb := parseTable(k.ok("get", "crd"))
		if want := []string{"CLUSTER", "NAME", "CREATED AT"}; !slices.Equal(tb.header, want) {
			t.Errorf("get crd: header %v, want %v", tb.header, want)
		}
		if len(tb.rows) != 1 || tb.rows[0][0] != "fleet-1,fleet-2" || tb.rows[0][1] != name {
			t.Errorf("get crd: rows %v, want one: fleet-1,fleet-2 %s", tb.rows, name)
		}
		uid := func(cluster string) string {
			cl, _ := f.Cluster(cluster)
			crd, err := apiextensionsclient.NewForConfigOrDie(cl.AdminConfig()).ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: %v", cluster, err)
			}
			return string(crd.UID)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := json.Unmarshal([]byte(k.ok("get", "crd", name, "-o", "json")), &crd); err != nil {
			t.Fatal(err)
		}
		if string(crd.UID) != uid("fleet-1") || crd.Annotations["multicache.io/clusters"] != "fleet-1,fleet-2" || crd.Annotations["multicache.io/cluster"] != "fleet-1" || crd.Spec.Names.Kind != "Widget" {
			t.Errorf("get crd %s: uid %s, annotations %v, kind %s: want fleet-1's definition, served by fleet-1 and fleet-2", name, crd.UID, crd.Annotations, crd.Spec.Names.Kind)
		}
		var list apiextensionsv1.CustomResourceDefinitionList
		if err := json.Unmarshal([]byte(k.ok("get", "crd", "-l", "multicache.io/cluster=fleet-2", "-o", "json")), &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || string(list.Items[0].UID) != uid("fleet-2") || list.Items[0].Annotations["multicache.io/clusters"] != "fleet-2" {
			t.Errorf("get crd -l multicache.io/cluster=fleet-2: %d items: want fleet-2's definition alone", len(list.Items))
		}
		if err := json.Unmarshal([]byte(k.ok("get", "--raw", "/clusters/fleet-3/apis/apiextensions.k8s.io/v1/customresourcedefinitions")), &list); err != nil || len(list.Items) != 0 {
			t.Errorf("/clusters/fleet-3 serves no CRD the daemon caches: %d items (%v)", len(list.Items), err)
		}
		if _, errs, ok := k.run("get", "crd", "nothing.example.io"); ok || !strings.Contains(errs, "NotFound") {
			t.Errorf("get crd nothing.example.io: ok=%t, stderr %q: want NotFound", ok, errs)
		}
		if _, errs, ok := k.run("delete", "crd", name); ok || !strings.Contains(errs, "MethodNotAllowed") {
			t.Errorf("delete crd: ok=%t, stderr %q: want MethodNotAllowed", ok, errs)
		}

		// client-go's informer: it lists, watches, and sees fleet-3 join as an update.
		events := newEventCounts()
		inf := dynamicinformer.NewDynamicSharedInformerFactory(dynamic.NewForConfigOrDie(&rest.Config{Host: d.URL}), 0).
			ForResource(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")).Informer()
		if _, err := inf.AddEventHandler(events.handler()); err != nil {
			t.Fatal(err)
		}
		ictx, stop := context.WithCancel(ctx)
		defer stop()
		go inf.Run(ictx.Done())
		if !cache.WaitForCacheSync(ictx.Done(), inf.HasSynced) || len(inf.GetStore().List()) != 1 {
			t.Fatalf("CRD informer: synced with %d objects, want 1", len(inf.GetStore().List()))
		}
		loader, err := fleet.NewLoader(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := loader.EnsureCRD(ctx, "fleet-3"); err != nil {
			t.Fatal(err)
		}
		// fleet-3 looks for the resource again every discovery interval (30 s), then the watch
		// polls the definitions every 5 s.
		harness.WaitFor(t, "the informer's definition served by fleet-3 too", 2*time.Minute, func() bool {
			objs := inf.GetStore().List()
			if len(objs) != 1 {
				return false
			}
			m, _ := meta.Accessor(objs[0])
			return m.GetAnnotations()["multicache.io/clusters"] == "fleet-1,fleet-2,fleet-3"
		})
		events.mu.Lock()
		defer events.mu.Unlock()
		if events.adds["fleet-1"] != 1 || events.updates["fleet-1"] < 1 || len(events.delete) != 0 {
			t.Errorf("CRD informer: adds %v, updates %v, deletes %v: want one add, an update, no delete", events.adds, events.updates, events.delete)
		}
	})
}

// tableAt GETs url as a Table, every page of it, with cfg's credentials when cfg is not nil.
func tableAt(ctx context.Context, t *testing.T, url string, cfg *rest.Config) metav1.Table {
	t.Helper()
	client := http.DefaultClient
	if cfg != nil {
		rt, err := rest.TransportFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		client = &http.Client{Transport: rt}
	}
	var all metav1.Table
	for cont := ""; ; {
		u := url
		if cont != "" {
			u += "?continue=" + neturl.QueryEscape(cont)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var tb metav1.Table
		err = json.NewDecoder(resp.Body).Decode(&tb)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s as a Table: %d %v", u, resp.StatusCode, err)
		}
		if all.ColumnDefinitions == nil {
			all.ColumnDefinitions = tb.ColumnDefinitions
		}
		all.Rows = append(all.Rows, tb.Rows...)
		if cont = tb.Continue; cont == "" {
			return all
		}
	}
}

// rowMeta decodes a row's PartialObjectMetadata.
func rowMeta(t *testing.T, r metav1.TableRow) metav1.PartialObjectMetadata {
	t.Helper()
	var m metav1.PartialObjectMetadata
	if err := json.Unmarshal(r.Object.Raw, &m); err != nil || m.Kind != "PartialObjectMetadata" {
		t.Fatalf("row object %s: %v", r.Object.Raw, err)
	}
	return m
}

// setStatuses gives some Pods and Nodes of every cluster the statuses a kubelet would write,
// so that the printers' columns have something to print: running, restarting, waiting and
// succeeded Pods; Ready Nodes with addresses, versions and roles.
func setStatuses(ctx context.Context, t *testing.T, f *fleet.Fleet) {
	t.Helper()
	now := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	for _, c := range f.Names() {
		cs, _ := f.Clientset(c)
		pods, err := cs.CoreV1().Pods("load-0").List(ctx, metav1.ListOptions{Limit: 4})
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range pods.Items {
			p.Status.PodIP, p.Status.StartTime = fmt.Sprintf("10.0.%d.%d", len(c), i+1), &now
			p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}}
			var statuses []corev1.ContainerStatus
			for _, ctr := range p.Spec.Containers {
				st := corev1.ContainerStatus{Name: ctr.Name, Image: ctr.Image, Ready: true, RestartCount: int32(i), Started: ptr(true),
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}
				if i == 2 {
					st.Ready, st.State = false, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
					st.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: now}}
				}
				statuses = append(statuses, st)
			}
			p.Status.ContainerStatuses = statuses
			p.Status.Phase = []corev1.PodPhase{corev1.PodRunning, corev1.PodRunning, corev1.PodRunning, corev1.PodSucceeded}[i]
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
			if _, err := cs.CoreV1().Pods("load-0").UpdateStatus(ctx, &p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range nodes.Items {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: now, LastTransitionTime: now}}
			n.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: "v1.37.1", OSImage: "Debian GNU/Linux 13", KernelVersion: "6.12.0", ContainerRuntimeVersion: "containerd://2.1.0"}
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.%d.%d", len(c), i+1)}}
			if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, &n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }
