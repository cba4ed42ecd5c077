package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

const clientsConfig = `
kubeconfig:
  paths: [%q]
  include: ["fleet-*"]
resources:
  - name: configmaps
`

// clientLines runs a client that prints JSON lines, and collects them until the test ends.
type clientLines struct {
	mu    sync.Mutex
	lines []map[string]any
}

func runClient(t *testing.T, name string, cmd *exec.Cmd) *clientLines {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	cl := &clientLines{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				cl.mu.Lock()
				cl.lines = append(cl.lines, m)
				cl.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s: stderr:\n%s", name, stderr.String())
		}
	})
	return cl
}

// seen lists the lines that have op (and, for events, are of the test's objects) as
// "op cluster/name" or "TYPE cluster/name".
func (cl *clientLines) seen(prefix string) []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var out []string
	for _, m := range cl.lines {
		name, _ := m["name"].(string)
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		what, _ := m["op"].(string)
		if typ, ok := m["type"].(string); ok {
			what = typ
		}
		out = append(out, fmt.Sprintf("%s %s/%s", what, m["cluster"], name))
	}
	return out
}

func (cl *clientLines) has(op string) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, m := range cl.lines {
		if m["op"] == op {
			return true
		}
	}
	return false
}

// TestOfficialClients: the official clients, which no one here wrote, read the fleet through
// the daemon as their users write them:
//   - Debian's python3-kubernetes lists ConfigMaps in the fleet view and watches from the
//     list's resourceVersion (watch=True): it sees the adds, updates and deletes of every
//     cluster, each cluster's in order;
//   - @kubernetes/client-node's informer on /clusters/fleet-1, and another on the fleet view
//     narrowed by the cluster label to fleet-2: each sees its cluster's adds and deletes, and
//     nothing of the others.
//
// A client that is missing skips its part with the `make tools` step that installs it, except
// in CI, where it fails.
func TestOfficialClients(t *testing.T) {
	env := harness.Start(t, harness.Options{Timeout: 10 * time.Minute, Seed: fleet.Spec{Namespaces: 1}})
	ctx, f := env.Ctx, env.Fleet
	cfgPath := filepath.Join(t.TempDir(), "multicache.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(clientsConfig, f.Kubeconfig())), 0o600); err != nil {
		t.Fatal(err)
	}
	d := harness.StartDaemon(t, "--config", cfgPath)
	const ns = "load-0"
	missing := func(msg string) {
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}

	var py *clientLines
	if err := exec.Command("/usr/bin/python3", "-c", "import kubernetes").Run(); err != nil {
		missing("the official Python client is not installed (/usr/bin/python3 -c 'import kubernetes' fails); `make tools` installs Debian's python3-kubernetes")
	}
	py = runClient(t, "watch.py", exec.CommandContext(ctx, "/usr/bin/python3", filepath.Join("testdata", "watch.py"), d.URL, ns))

	jsModules := filepath.Join(fleet.DefaultBinDir(), "js", "node_modules")
	if _, err := os.Stat(filepath.Join(jsModules, "@kubernetes", "client-node")); err != nil {
		missing(fmt.Sprintf("the official JavaScript client is not installed (%v); `make tools` installs @kubernetes/client-node into bin/js", err))
	}
	// ESM resolves packages from the script's directory up: the script runs next to them.
	jsDir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", "informer.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(jsDir, "informer.mjs"), src, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(jsModules, filepath.Join(jsDir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	node := func(server string, args ...string) *clientLines {
		cmd := exec.CommandContext(ctx, "node", append([]string{filepath.Join(jsDir, "informer.mjs"), server, ns}, args...)...)
		return runClient(t, "informer.mjs "+server, cmd)
	}
	one := node(d.URL + "/clusters/fleet-1")
	narrowed := node(d.URL, "multicache.io/cluster=fleet-2")

	waitFor(t, "every client listed", time.Minute, func() bool {
		return py.has("list") && one.has("listed") && narrowed.has("listed")
	})
	// Writes in fleet-1 and fleet-2 (and fleet-3, which the informers must not see).
	for _, c := range []string{"fleet-1", "fleet-2", "fleet-3"} {
		cs, err := f.Clientset(c)
		if err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "clients-" + c, Namespace: ns}, Data: map[string]string{"v": "1"}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cm.Labels = map[string]string{"updated": "yes"}
		if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var pyWant []string
	for _, c := range []string{"fleet-1", "fleet-2", "fleet-3"} {
		for _, typ := range []string{"ADDED", "MODIFIED", "DELETED"} {
			pyWant = append(pyWant, typ+" "+c+"/clients-"+c)
		}
	}
	want := map[*clientLines][]string{
		py:       pyWant, // the whole fleet
		one:      {"add fleet-1/clients-fleet-1", "delete fleet-1/clients-fleet-1"},
		narrowed: {"add fleet-2/clients-fleet-2", "delete fleet-2/clients-fleet-2"},
	}
	reads := map[*clientLines]string{one: "fleet-1", narrowed: "fleet-2"} // the informers' one cluster
	names := map[*clientLines]string{py: "python3-kubernetes watch, fleet view", one: "client-node informer, /clusters/fleet-1", narrowed: "client-node informer, fleet view, cluster label fleet-2"}
	for cl, events := range want {
		ok := waitFor(t, "", 30*time.Second, func() bool {
			got := cl.seen("clients-")
			for _, e := range events {
				if !contains(got, e) {
					return false
				}
			}
			return true
		})
		got := cl.seen("clients-")
		if !ok {
			t.Errorf("%s: saw %v, want (among them) %v", names[cl], got, events)
		}
		for _, e := range got {
			if only, ok := reads[cl]; ok && !strings.Contains(e, " "+only+"/") {
				t.Errorf("%s: saw %q, of a cluster it does not read", names[cl], e)
			}
		}
	}
	// Per cluster, the Python watch saw its events in order.
	for _, c := range []string{"fleet-1", "fleet-2", "fleet-3"} {
		var order []string
		for _, e := range py.seen("clients-" + c) {
			order = append(order, strings.Fields(e)[0])
		}
		if strings.Join(order, ",") != "ADDED,MODIFIED,DELETED" {
			t.Errorf("python3-kubernetes watch: %s's events in the order %v", c, order)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// waitFor polls f until it holds or within passes; it reports whether it held. With a what,
// a timeout fails the test.
func waitFor(t *testing.T, what string, within time.Duration, f func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if f() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	if what != "" {
		t.Fatalf("timed out after %s waiting for %s", within, what)
	}
	return false
}
