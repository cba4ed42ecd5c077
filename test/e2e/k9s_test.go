package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// k9sConfig turns off what a test must not do (the release check reaches outside the machine)
// and the logo, which takes rows.
const k9sConfig = `k9s:
  skipLatestRevCheck: true
  ui:
    logoless: true
    noIcons: true
`

// k9s is k9s running in a tmux session of its own, driven by keys, read by capturing its pane.
type k9s struct {
	t       *testing.T
	session string
}

func (k k9s) tmux(args ...string) string {
	k.t.Helper()
	out, err := exec.Command("tmux", args...).CombinedOutput()
	if err != nil {
		k.t.Fatalf("tmux %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// keys presses keys in k9s (tmux key names: Enter, Escape).
func (k k9s) keys(keys ...string) { k.tmux(append([]string{"send-keys", "-t", k.session}, keys...)...) }

// command types a k9s command (":pods") or filter ("/name"), then Enter: the prompt's key
// first, until the prompt shows; then the rest, until the prompt shows it. Keys typed before
// the prompt opened would be hotkeys ("l" opens the logs).
func (k k9s) command(cmd string) {
	kind := byte('>')
	if cmd[0] == '/' {
		kind = '/'
	}
	for range 3 {
		k.tmux("send-keys", "-t", k.session, "-l", "--", cmd[:1])
		if _, ok := k.within(3*time.Second, func(p string) bool { return promptShows(p, kind, "") }); !ok {
			continue
		}
		k.tmux("send-keys", "-t", k.session, "-l", "--", cmd[1:])
		if _, ok := k.within(3*time.Second, func(p string) bool { return promptShows(p, kind, cmd[1:]) }); ok {
			break
		}
		k.keys("Escape")
	}
	k.keys("Enter")
}

// promptLine is a line of k9s's prompt box (icons off): its kind ('>' a command, '/' a filter)
// and what was typed.
var promptLine = regexp.MustCompile(`(?m)^\s*│\s*([/>]) ?(\S*)`)

// promptShows reports whether the pane shows k9s's prompt of kind holding text (and perhaps
// the completion k9s suggests after it).
func promptShows(pane string, kind byte, text string) bool {
	for _, m := range promptLine.FindAllStringSubmatch(pane, -1) {
		if m[1][0] == kind && strings.HasPrefix(m[2], text) {
			return true
		}
	}
	return false
}

func (k k9s) pane() string { return k.tmux("capture-pane", "-t", k.session, "-p") }

// await waits until the pane shows what f accepts, and returns it.
func (k k9s) await(what string, f func(pane string) bool) string {
	k.t.Helper()
	pane, ok := k.within(30*time.Second, f)
	if !ok {
		k.t.Fatalf("k9s: timed out waiting for %s; its pane:\n%s", what, pane)
	}
	return pane
}

// within polls the pane for up to d until f accepts it; ok says whether it did.
func (k k9s) within(d time.Duration, f func(pane string) bool) (pane string, ok bool) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if pane = k.pane(); f(pane) {
			return pane, true
		}
	}
	return pane, false
}

// commandUntil types cmd and waits for the pane f accepts. A loaded machine can drop the
// keys typed before k9s opened its prompt: the command is typed again (after Escape) up to
// twice more before it fails.
func (k k9s) commandUntil(cmd, what string, f func(pane string) bool) string {
	k.t.Helper()
	for range 2 {
		k.command(cmd)
		if pane, ok := k.within(10*time.Second, f); ok {
			return pane
		}
		k.keys("Escape")
	}
	k.command(cmd)
	return k.await(what, f)
}

// k9sRows are the table rows of a pane: the cells of each line between the box's borders
// after the header that starts with first.
func k9sRows(pane, first string) (header []string, rows [][]string) {
	in := false
	for _, line := range strings.Split(pane, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "│") {
			continue // outside the table's box: the header panel, a flash message, the crumbs
		}
		line = strings.Trim(line, "│")
		cells := strings.Fields(line)
		switch {
		case len(cells) > 0 && cells[0] == first:
			header, in = cells, true
		case in && len(cells) >= 3 && !strings.ContainsAny(line, "└┘"):
			rows = append(rows, cells)
		}
	}
	return header, rows
}

// k9sDrawn reports whether pane's view titles n objects and has drawn their n rows under a
// CLUSTER column: k9s may draw the title's count before it draws the rows.
func k9sDrawn(pane, view string, n int) bool {
	_, rows := k9sRows(pane, "CLUSTER")
	return k9sCount(pane, view) == n && len(rows) == n
}

// k9sCount is the count in a view's title, "pods(all)[36]".
func k9sCount(pane, view string) int {
	m := regexp.MustCompile(regexp.QuoteMeta(view) + `\((?:all|[a-z0-9-]+)\)\[(\d+)\]`).FindStringSubmatch(pane)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestK9s drives k9s, built from the Go module proxy by `make tools`, against the daemon with an
// ordinary kubeconfig and the CLUSTER columns of configs/k9s/views.yaml: its Pods, Deployments,
// Nodes, a CRD's and the CustomResourceDefinitions' views, a filter, a cluster's label filter,
// an object's YAML and describe, the logs view's refusal, and a Pod created meanwhile. Its rows
// are checked against the API servers, and its log for the definitions it could not load.
func TestK9s(t *testing.T) {
	bin := filepath.Join(fleet.DefaultBinDir(), "k9s")
	_, statErr := os.Stat(bin)
	_, tmuxErr := exec.LookPath("tmux")
	if statErr != nil || tmuxErr != nil {
		msg := fmt.Sprintf("k9s (%v) or tmux (%v) is missing: `make tools` builds k9s into bin/; tmux comes from Debian's tmux package", statErr, tmuxErr)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	env := harness.Start(t, harness.Options{Timeout: 10 * time.Minute, Seed: fleet.Spec{Namespaces: 2, Nodes: 3, PodsPerNamespace: 5, DeploymentsPerNamespace: 2,
		WidgetsPerNamespace: 2, CRDClusters: []string{"fleet-1", "fleet-2"}}})
	ctx, f := env.Ctx, env.Fleet
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "multicache.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(kubectlConfig, f.Kubeconfig())), 0o600); err != nil {
		t.Fatal(err)
	}
	d := harness.StartDaemon(t, "--config", cfgPath)
	truth := truthPods(ctx, t, f)

	// An ordinary kubeconfig, k9s's config, and the views file the repository ships.
	kubeconfig := filepath.Join(dir, "kubeconfig")
	// The fleet view, and fleet-2's under /clusters/fleet-2.
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fleet
  cluster:
    server: %[1]s
- name: fleet-2
  cluster:
    server: %[1]s/clusters/fleet-2
contexts:
- name: fleet
  context: {cluster: fleet, user: me}
- name: fleet-2
  context: {cluster: fleet-2, user: me}
users:
- name: me
  user: {}
current-context: fleet
`, d.URL)
	views, err := os.ReadFile(filepath.Join("..", "..", "configs", "k9s", "views.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfgDir := filepath.Join(dir, "k9s")
	for path, body := range map[string]string{kubeconfig: kc, filepath.Join(cfgDir, "config.yaml"): k9sConfig, filepath.Join(cfgDir, "views.yaml"): string(views)} {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	start := func(context string) k9s {
		k := k9s{t: t, session: "multicache-k9s-" + context + "-" + strconv.Itoa(os.Getpid())}
		k.tmux("new-session", "-d", "-s", k.session, "-x", "220", "-y", "70",
			fmt.Sprintf("env HOME=%[1]s KUBECONFIG=%[2]s K9S_CONFIG_DIR=%[3]s XDG_STATE_HOME=%[1]s/state XDG_DATA_HOME=%[1]s/data %[4]s -A --context %[5]s --logFile %[1]s/k9s-%[5]s.log",
				dir, kubeconfig, cfgDir, bin, context))
		t.Cleanup(func() {
			_ = exec.Command("tmux", "kill-session", "-t", k.session).Run()
			if t.Failed() {
				if b, err := os.ReadFile(filepath.Join(dir, "k9s-"+context+".log")); err == nil {
					t.Logf("k9s log (%s):\n%s", context, tail(string(b), 4000))
				}
			}
		})
		return k
	}
	k := start("fleet")

	// Pods across the fleet, with the CLUSTER column. k9s keys rows by namespace/name: the
	// fleet view shows one row per distinct namespace/name (configs/k9s/views.yaml says so).
	distinct := map[string]bool{}
	for key := range truth {
		distinct[strings.SplitN(key, "|", 2)[1]] = true
	}
	k.command(":pods")
	pane := k.await("the pods view", func(p string) bool { return k9sDrawn(p, "pods", len(distinct)) })
	header, rows := k9sRows(pane, "CLUSTER")
	if len(header) < 3 || header[1] != "NAMESPACE" || header[2] != "NAME" || len(rows) == 0 {
		t.Fatalf("pods: header %v, %d rows; pane:\n%s", header, len(rows), pane)
	}
	for _, r := range rows {
		if _, ok := truth[r[0]+"|"+r[1]+"/"+r[2]]; !ok {
			t.Errorf("pods: row %v is no Pod of the API servers", r)
		}
	}

	// One cluster, in its context (/clusters/fleet-2): every Pod of fleet-2, each row fleet-2's.
	k = start("fleet-2")
	k.command(":pods")
	inFleet2 := 0
	for key := range truth {
		if strings.HasPrefix(key, "fleet-2|") {
			inFleet2++
		}
	}
	pane = k.await("fleet-2's pods", func(p string) bool { return k9sDrawn(p, "pods", inFleet2) })
	if _, rows := k9sRows(pane, "CLUSTER"); len(rows) == 0 || anyRow(rows, func(r []string) bool { return r[0] != "fleet-2" }) {
		t.Errorf("pods of fleet-2: rows %v", rows)
	}
	// Followed live: a Pod created in fleet-2 shows up.
	cs, err := f.Clientset("fleet-2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("load-0").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "k9s-live"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k.await("the Pod created meanwhile", func(p string) bool { return strings.Contains(p, "k9s-live") })

	// A filter.
	pane = k.commandUntil("/k9s-live", "the filtered view", func(p string) bool { return k9sDrawn(p, "pods", 1) })
	if _, rows := k9sRows(pane, "CLUSTER"); len(rows) != 1 || rows[0][0] != "fleet-2" || rows[0][2] != "k9s-live" {
		t.Errorf("filter k9s-live: rows %v", rows)
	}
	// Its YAML, then describe.
	k.keys("y")
	pane = k.await("the YAML", func(p string) bool { return strings.Contains(p, "multicache.io/cluster: fleet-2") })
	if !strings.Contains(pane, "name: k9s-live") {
		t.Errorf("YAML of k9s-live:\n%s", pane)
	}
	back := func() {
		k.keys("Escape")
		k.await("the pods view again", func(p string) bool { return k9sCount(p, "pods") == 1 })
	}
	back()
	k.keys("d")
	// The view opens with its title and fills once the describe has been answered.
	pane = k.await("describe", func(p string) bool {
		return strings.Contains(p, "Describe(load-0/k9s-live)") && strings.Contains(p, "Namespace:")
	})
	if !strings.Contains(pane, "multicache.io/cluster") || !strings.Contains(pane, "Namespace:") {
		t.Errorf("describe of k9s-live:\n%s", pane)
	}
	back()
	// Logs: k9s asks whether it may (a SelfSubjectAccessReview of pods/log), is told no, and
	// says so itself; the daemon would answer the log request with a 404 Status.
	k.keys("l")
	k.await("the logs view", func(p string) bool { return strings.Contains(p, "Logs(load-0/k9s-live") })
	harness.WaitFor(t, "k9s's own refusal of the logs", 30*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "k9s-fleet-2.log"))
		return strings.Contains(string(b), "not authorized to view pod logs")
	})
	k.keys("Escape")
	k.await("the pods view again", func(p string) bool { return k9sCount(p, "pods") == 1 })
	k.keys("Escape") // the filter
	time.Sleep(300 * time.Millisecond)

	// Deployments, Nodes and the CRD in fleet-2: their counts, and fleet-2 in CLUSTER where the
	// views file adds it.
	for _, v := range []struct {
		cmd, view string
		want      int
		cluster   bool
	}{
		{":deploy", "deployments", 2 * 2, true},
		{":nodes", "nodes", 3, true},
		{":widgets", "widgets", 2 * 2, false},
		{":crds", "customresourcedefinitions", 1, false},
	} {
		k.command(v.cmd)
		pane := k.await("the "+v.view+" view", func(p string) bool {
			if v.cluster {
				return k9sDrawn(p, v.view, v.want)
			}
			return k9sCount(p, v.view) == v.want
		})
		if !v.cluster {
			continue
		}
		if header, rows := k9sRows(pane, "CLUSTER"); len(header) == 0 || anyRow(rows, func(r []string) bool { return r[0] != "fleet-2" }) {
			t.Errorf("%s: header %v, rows %v; want fleet-2 in CLUSTER", v.view, header, rows)
		}
	}
	// k9s read the definitions it builds its resource list from, in both contexts.
	for _, context := range []string{"fleet", "fleet-2"} {
		b, err := os.ReadFile(filepath.Join(dir, "k9s-"+context+".log"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "CRDs load Fail") {
			t.Errorf("k9s (%s) could not load the CustomResourceDefinitions: %s", context, tail(string(b), 2000))
		}
	}
}

// anyRow reports whether f accepts any of rows.
func anyRow(rows [][]string, f func([]string) bool) bool {
	for _, r := range rows {
		if f(r) {
			return true
		}
	}
	return false
}
