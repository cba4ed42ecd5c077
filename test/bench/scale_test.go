package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// S1: a hundred clusters on one machine. A few real API servers, each seen through many
// kubeconfig contexts (fleet.WriteAliases), are a hundred clusters to the daemon: it runs a
// reflector per context and caches each context's objects as a cluster of its own. The API
// servers are shared, so this measures the daemon (memory, sync, queries, moves), not a
// hundred API servers' load.

const scaleConfig = `kubeconfig:
  paths: [%q]
resources:
  - name: pods
    indexes: [pod-node]
  - name: configmaps
`

// scaleProc is one daemon process of the benchmark.
type scaleProc struct {
	id   string
	cmd  *exec.Cmd
	url  string
	log  string
	done chan error
	once sync.Once
}

func startScaleProc(b *testing.B, bin, id, addr string, args ...string) *scaleProc {
	b.Helper()
	logf, err := os.Create(filepath.Join(b.TempDir(), id+".log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"serve", "--listen", addr, "--log-format", "console", "--log-level", "warn", "--profiling"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &scaleProc{id: id, cmd: cmd, url: "http://" + addr, log: logf.Name(), done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); logf.Close() }()
	b.Cleanup(func() { p.stop(syscall.SIGTERM) })
	return p
}

// stop signals the process and waits for it (SIGKILL after 30 s).
func (p *scaleProc) stop(sig syscall.Signal) {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}

var scaleHTTP = &http.Client{Timeout: time.Minute}

func (p *scaleProc) get(path string) ([]byte, int, error) {
	resp, err := scaleHTTP.Get(p.url + path)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return body, resp.StatusCode, err
}

func (p *scaleProc) ready() bool {
	_, code, err := p.get("/readyz")
	return err == nil && code == http.StatusOK
}

// clusters is the fleet as p reports it: cluster → owner, for the synced ones.
func (p *scaleProc) synced() (map[string]string, int) {
	body, code, err := p.get(api.ClustersPath)
	if err != nil || code != http.StatusOK {
		return nil, 0
	}
	var cl api.Clusters
	if json.Unmarshal(body, &cl) != nil {
		return nil, 0
	}
	out := map[string]string{}
	for _, c := range cl.Clusters {
		if c.State == "Synced" {
			out[c.Name] = c.Owner
		}
	}
	return out, len(cl.Clusters)
}

// memory is p's live heap (read right after a forced GC) and resident set, in bytes.
func (p *scaleProc) memory(b *testing.B) (heapBytes, rssBytes float64) {
	b.Helper()
	if _, _, err := p.get("/debug/pprof/heap?gc=1"); err != nil {
		b.Fatal(err)
	}
	body, _, err := p.get("/metrics")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_alloc_bytes "); ok {
			heapBytes, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(status)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			rssBytes = kb * 1024
		}
	}
	return heapBytes, rssBytes
}

// latencies times n GETs of path(i), each read whole, and returns p50 and p99.
func (p *scaleProc) latencies(b *testing.B, n int, path func(i int) string) (p50, p99 time.Duration) {
	b.Helper()
	var ds []time.Duration
	for i := range n + 2 {
		start := time.Now()
		body, code, err := p.get(path(i))
		took := time.Since(start)
		if err != nil || code != http.StatusOK {
			b.Fatalf("%s: GET %s: %d %v %.200s", p.id, path(i), code, err, body)
		}
		if i >= 2 { // two to warm up
			ds = append(ds, took)
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], ds[min(len(ds)-1, len(ds)*99/100)]
}

func gib(x float64) string { return fmt.Sprintf("%.2f GiB", x/(1<<30)) }

// BenchmarkFleetScale (S1): 100 clusters × 20k objects (5 API servers × 20 contexts each),
// first on one replica, then on 3 replicas sharded over Leases.
func BenchmarkFleetScale(b *testing.B) {
	servers := harness.EnvInt("MULTICACHE_BENCH_SCALE_SERVERS", 5)
	aliases := harness.EnvInt("MULTICACHE_BENCH_SCALE_ALIASES", 20)
	per := harness.EnvInt("MULTICACHE_BENCH_SCALE_OBJECTS", 20000)
	queries := harness.EnvInt("MULTICACHE_BENCH_SCALE_QUERIES", 200)
	bin := harness.Binary(b)
	env := harness.Start(b, harness.Options{Clusters: servers, Timeout: 3 * time.Hour})
	ctx, f, loader := env.Ctx, env.Fleet, env.Loader
	const namespaces = 10
	perNS := per / 2 / namespaces
	nodes := perNS * namespaces / 10
	seedStart := time.Now()
	n, err := loader.BulkSeed(ctx, fleet.BulkSpec{Namespaces: namespaces, PodsPerNamespace: perNS, ConfigMapsPerNamespace: perNS, Nodes: nodes})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("bulk-seeded %d objects in each of %d API servers in %s", n, servers, time.Since(seedStart).Round(time.Second))
	dir := b.TempDir()
	aliasPath := filepath.Join(dir, "aliases.kubeconfig")
	names, err := f.WriteAliases(aliasPath, aliases)
	if err != nil {
		b.Fatal(err)
	}
	clusters, objects := len(names), n*len(names)
	cfgPath := filepath.Join(dir, "multicache.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(scaleConfig, aliasPath)), 0o600); err != nil {
		b.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	page := func(int) string { return "/api/v1/pods?limit=500" }
	byNode := func(int) string {
		return "/api/v1/pods?limit=500&fieldSelector=spec.nodeName%3D" + fleet.NodeName(rnd.IntN(nodes))
	}
	waitAll := func(what string, p *scaleProc, within time.Duration, ok func(map[string]string) bool) time.Duration {
		start := time.Now()
		for {
			if s, _ := p.synced(); len(s) == clusters && (ok == nil || ok(s)) {
				return time.Since(start)
			}
			if time.Since(start) > within {
				log, _ := os.ReadFile(p.log)
				b.Fatalf("%s: not within %s; %s's log:\n%s", what, within, p.id, tail(string(log), 3000))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// One replica.
	start := time.Now()
	one := startScaleProc(b, bin, "single", harness.FreePort(b), "--config", cfgPath)
	for !one.ready() {
		if time.Since(start) > 30*time.Minute {
			b.Fatal("one replica: not ready in 30 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}
	oneReady := time.Since(start)
	waitAll("one replica: every cluster synced", one, 30*time.Minute, nil)
	oneHeap, oneRSS := one.memory(b)
	onePage50, onePage99 := one.latencies(b, queries, page)
	oneNode50, oneNode99 := one.latencies(b, queries, byNode)
	b.Logf("one replica: ready in %s, heap %s, RSS %s; page of 500 p50 %s p99 %s; by node p50 %s p99 %s",
		oneReady.Round(10*time.Millisecond), gib(oneHeap), gib(oneRSS), onePage50, onePage99, oneNode50, oneNode99)
	one.stop(syscall.SIGTERM)

	// Three replicas, sharded over Leases in the first API server (the management cluster).
	mgmt, err := f.Clientset(f.Names()[0])
	if err != nil {
		b.Fatal(err)
	}
	const shardNS = "multicache-bench"
	if _, err := mgmt.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shardNS}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	var rs []*scaleProc
	for _, id := range []string{"r1", "r2", "r3"} {
		addr := harness.FreePort(b)
		rs = append(rs, startScaleProc(b, bin, id, addr, "--config", cfgPath, "--sharding", "--management-kubeconfig", f.Kubeconfig(),
			"--management-context", f.Names()[0], "--sharding-namespace", shardNS, "--advertise-url", "http://"+addr, "--replica-id", id))
	}
	// Ready: every replica ready, and every cluster synced at its owner.
	for _, r := range rs {
		for !r.ready() {
			if time.Since(start) > 30*time.Minute {
				b.Fatalf("%s: not ready in 30 minutes", r.id)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitAll("three replicas: every cluster synced", rs[0], 30*time.Minute, nil)
	threeReady := time.Since(start)
	// Balanced: each replica owns a share, and the owners hold still for 3 lease durations.
	const lease = 15 * time.Second
	stable, since := "", time.Now()
	waitAll("three replicas: ownership shared and stable", rs[0], 30*time.Minute, func(s map[string]string) bool {
		owners := map[string]int{}
		for _, o := range s {
			owners[o]++
		}
		now := fmt.Sprint(owners)
		if now != stable {
			stable, since = now, time.Now()
		}
		return len(owners) == 3 && time.Since(since) > 3*lease
	})
	balanced := time.Since(start)
	// A replica returns the memory moves freed once they have been quiet for 35 s
	// (returnMemoryAfterMoves); the owners have held still for 45 s: give it 15 s more.
	time.Sleep(15 * time.Second)
	var heaps, rsss []float64
	var lines []string
	for _, r := range rs {
		h, rss := r.memory(b)
		heaps, rsss = append(heaps, h), append(rsss, rss)
		lines = append(lines, fmt.Sprintf("%s heap %s RSS %s", r.id, gib(h), gib(rss)))
	}
	fanPage50, fanPage99 := rs[0].latencies(b, queries, page)
	fanNode50, fanNode99 := rs[0].latencies(b, queries, byNode)
	b.Logf("three replicas: every cluster synced %s after start, shared and stable %s after; %s; page of 500 through r1 p50 %s p99 %s; by node p50 %s p99 %s; owners %s",
		threeReady.Round(10*time.Millisecond), balanced.Round(10*time.Millisecond), strings.Join(lines, ", "), fanPage50, fanPage99, fanNode50, fanNode99, stable)

	// Kill one: its clusters are served again by the others.
	killed := rs[2]
	killed.stop(syscall.SIGKILL)
	kill := time.Now()
	waitAll("every cluster served again after r3 was killed", rs[0], 10*time.Minute, func(s map[string]string) bool {
		for _, o := range s {
			if o == killed.id {
				return false
			}
		}
		return true
	})
	takeover := time.Since(kill)
	b.Logf("r3 killed: every cluster served again in %s (lease duration %s)", takeover.Round(10*time.Millisecond), lease)

	maxHeap, maxRSSRatio := 0.0, 0.0
	for i := range heaps {
		maxHeap = max(maxHeap, heaps[i])
		maxRSSRatio = max(maxRSSRatio, rsss[i]/heaps[i])
	}
	recordGoals(b,
		goal{ID: "S1", Figure: "2M objects / 100 clusters, 3 replicas: heap of the largest replica ÷ one replica's", Goal: "≤ 0.4×",
			Measured: fmt.Sprintf("%.2f× (%s vs %s; one run)", maxHeap/oneHeap, gib(maxHeap), gib(oneHeap)), Met: met(maxHeap/oneHeap <= 0.4)},
		goal{ID: "S1", Figure: "the same: RSS ÷ heap per replica, largest", Goal: "≤ 1.5×",
			Measured: fmt.Sprintf("%.2f× (one run)", maxRSSRatio), Met: met(maxRSSRatio <= 1.5)},
		goal{ID: "S1", Figure: "fleet list page of 500 through a non-owner, p99 ÷ one replica's", Goal: "≤ 3×",
			Measured: fmt.Sprintf("%.2f× (%s vs %s; one run)", float64(fanPage99)/float64(onePage99), fanPage99.Round(time.Millisecond), onePage99.Round(time.Millisecond)), Met: met(fanPage99 <= 3*onePage99)},
		goal{ID: "S1", Figure: "kill one of 3 replicas (lease 15 s): every cluster served again", Goal: "≤ 2 lease durations + the slowest relist",
			Measured: fmt.Sprintf("%s (one run; the slowest relist not measured)", takeover.Round(100*time.Millisecond)), Met: "—"},
	)
	writeSection(b, "S1: a hundred clusters, one replica and three", fmt.Sprintf(`%s

%d clusters × %d objects (%d in all, half Pods, half ConfigMaps): %d kube-apiservers bulk-seeded
with %d objects each, every one seen through %d kubeconfig contexts (fleet.WriteAliases), each
context a cluster of its own to the daemon. The API servers are shared: this measures the
daemon's memory, sync, queries and moves, not the load of %d separate API servers. One run
(not the median of 5 the other sections give): a run takes about %s on this machine.

| figure | one replica | three replicas (sharded, lease %s) | ratio | goal |
|---|---|---|---|---|
| heap | %s | %s | %.2f× (largest replica ÷ one) | ≤ 0.4× |
| RSS ÷ heap | %.2f | %.2f (largest) | | ≤ 1.5 |
| start → every cluster synced | %s (ready %s) | %s (shared and stable after %s) | | |
| fleet list page of 500, p50 / p99 | %s / %s | %s / %s (through r1) | %.2f× p99 | ≤ 3× |
| index query (spec.nodeName, ≤ 500), p50 / p99 | %s / %s | %s / %s | %.2f× p99 | |
| one replica killed: every cluster served again | | %s | | ≤ 2 lease durations + the slowest relist |

Per replica: %s. Not measured yet: write → watch-client latency through a non-owner.

Command: `+"`make bench-scale`"+` (`+"`go test -run '^$' -bench FleetScale -benchtime 1x -timeout 3h -v ./test/bench/`"+`)
`, machineLine(), clusters, n, objects, servers, n, aliases, clusters, time.Since(seedStart).Round(time.Minute), lease,
		gib(oneHeap), gib(maxHeap), maxHeap/oneHeap, oneRSS/oneHeap, maxRSSRatio,
		oneReady.Round(10*time.Millisecond), oneReady.Round(10*time.Millisecond), threeReady.Round(10*time.Millisecond), balanced.Round(10*time.Millisecond),
		onePage50, onePage99, fanPage50, fanPage99, float64(fanPage99)/float64(onePage99),
		oneNode50, oneNode99, fanNode50, fanNode99, float64(fanNode99)/float64(oneNode99),
		takeover.Round(10*time.Millisecond), strings.Join(lines, ", ")))
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
