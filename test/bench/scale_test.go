package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

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
	// lastInuse is the heap's spans in use (go_memstats_heap_inuse_bytes) at the last
	// memory reading: above the live heap by the fragmentation of partly used spans.
	lastInuse float64
	// lastIdle and lastReleased are the heap's free spans and those of them returned to the
	// OS (go_memstats_heap_idle_bytes, go_memstats_heap_released_bytes) at that reading: their
	// difference is resident memory the heap holds for its next growth.
	lastIdle, lastReleased float64
	// lastReturn is how long before that reading the daemon last returned freed memory to the
	// OS (multicache_memory_returned_timestamp_seconds); 0 when it had not.
	lastReturn time.Duration
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

// stopGrace is how long stop waits before SIGKILL: above a sharded replica's whole shutdown
// (a lease duration, the fence writes, up to 90 s while its states are taken, the HTTP drain),
// as deploy/sharded's grace period is.
const stopGrace = 150 * time.Second

// stop signals the process and waits for it (SIGKILL after stopGrace, logged: a replica that
// had to be killed did not hand its clusters over as a graceful stop does).
func (p *scaleProc) stop(sig syscall.Signal) {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
			fmt.Fprintf(os.Stderr, "%s: still running %s after %s; killed\n", p.id, stopGrace, sig)
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

// synced is the fleet as p reports it: cluster → owner for the synced ones, and how many
// clusters it reports in all.
func (p *scaleProc) synced() (map[string]string, int) {
	all := p.clusters()
	out := map[string]string{}
	for _, c := range all {
		if c.State == "Synced" {
			out[c.Name] = c.Owner
		}
	}
	return out, len(all)
}

// memory is p's live heap (read right after a forced GC), its resident set, and its peak
// resident set so far (VmHWM), in bytes.
func (p *scaleProc) memory(b *testing.B) (heapBytes, rssBytes, peakBytes float64) {
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
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_inuse_bytes "); ok {
			inuse, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			p.lastInuse = inuse
		}
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_idle_bytes "); ok {
			p.lastIdle, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_released_bytes "); ok {
			p.lastReleased, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
		if v, ok := strings.CutPrefix(line, "multicache_memory_returned_timestamp_seconds "); ok {
			if ts, _ := strconv.ParseFloat(strings.TrimSpace(v), 64); ts > 0 {
				p.lastReturn = time.Since(time.Unix(0, int64(ts*1e9))).Round(time.Second)
			}
		}
	}
	rssBytes, err = procStatusBytes(p.cmd.Process.Pid, "VmRSS")
	if err != nil {
		b.Fatal(err)
	}
	peakBytes, err = procStatusBytes(p.cmd.Process.Pid, "VmHWM")
	if err != nil {
		b.Fatal(err)
	}
	return heapBytes, rssBytes, peakBytes
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

// clusters is the fleet as p reports it, by name.
func (p *scaleProc) clusters() map[string]api.Cluster {
	body, code, err := p.get(api.ClustersPath)
	if err != nil || code != http.StatusOK {
		return nil
	}
	var cl api.Clusters
	if json.Unmarshal(body, &cl) != nil {
		return nil
	}
	out := map[string]api.Cluster{}
	for _, c := range cl.Clusters {
		out[c.Name] = c
	}
	return out
}

// syncSeconds reads p's multicache_initial_sync_seconds: cluster → the longest of its
// resources' initial lists, in seconds.
func (p *scaleProc) syncSeconds(b *testing.B) map[string]float64 {
	b.Helper()
	body, _, err := p.get("/metrics")
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, `multicache_initial_sync_seconds{cluster="`)
		if !ok {
			continue
		}
		name, rest, _ := strings.Cut(rest, `"`)
		_, v, _ := strings.Cut(rest, "} ")
		if x, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			out[name] = max(out[name], x)
		}
	}
	return out
}

// watchLatency writes n ConfigMaps, rate a second, through writer (the API server behind
// cluster) into ns, and times each from just before its create to its ADDED event on a watch
// of ns in cluster read through p. Every object is deleted again afterwards.
func watchLatency(b *testing.B, ctx context.Context, p *scaleProc, cluster string, writer kubernetes.Interface, ns, prefix string, n int, rate float64) (p50, p99 time.Duration) {
	b.Helper()
	cfg := &rest.Config{Host: p.url + "/clusters/" + cluster, QPS: -1}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(wctx, metav1.ListOptions{LabelSelector: "s1-latency=" + prefix})
	if err != nil {
		b.Fatalf("%s: watch %s through %s: %v", p.id, cluster, p.id, err)
	}
	defer w.Stop()
	var mu sync.Mutex
	sent := make([]time.Time, n)
	seenAt := make([]bool, n)
	got := make([]time.Duration, 0, n)
	seen := make(chan struct{})
	go func() {
		defer close(seen)
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || ev.Type != watch.Added {
				continue
			}
			i, err := strconv.Atoi(strings.TrimPrefix(cm.Name, prefix+"-"))
			if err != nil || i < 0 || i >= n {
				continue
			}
			at := time.Now()
			mu.Lock()
			if !seenAt[i] { // an object is timed once, at its first ADDED
				seenAt[i] = true
				got = append(got, at.Sub(sent[i]))
			}
			done := len(got) == n
			mu.Unlock()
			if done {
				return
			}
		}
	}()
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	for i := range n {
		<-tick.C
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i), Labels: map[string]string{"s1-latency": prefix}}, Data: map[string]string{"i": strconv.Itoa(i)}}
		mu.Lock()
		sent[i] = time.Now()
		mu.Unlock()
		if _, err := writer.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			b.Fatalf("create %s: %v", cm.Name, err)
		}
	}
	tick.Stop()
	select {
	case <-seen:
	case <-time.After(time.Minute):
		mu.Lock()
		seen := len(got)
		mu.Unlock()
		b.Fatalf("%s: the watch of %s through %s saw %d of %d writes within a minute of the last", p.id, cluster, p.id, seen, n)
	}
	if err := writer.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "s1-latency=" + prefix}); err != nil {
		b.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n {
		b.Fatalf("%s: the watch of %s ended after %d of %d writes", p.id, cluster, len(got), n)
	}
	slices.Sort(got)
	return got[len(got)/2], got[min(len(got)-1, len(got)*99/100)]
}

// serverOf is the API server behind an alias (fleet.AliasName).
func serverOf(alias string) string { return alias[:strings.LastIndex(alias, "-a")] }

// singleRun is what one replica over a fleet measured.
type singleRun struct {
	oneReady, oneSynced      time.Duration
	oneHeap, oneRSS, onePeak float64
	onePage50, onePage99     time.Duration
	oneNode50, oneNode99     time.Duration
	oneWatch50, oneWatch99   time.Duration
	// probe is the cluster the write → watch probe watched.
	probe string
}

// shardedRun is what three replicas sharding a fleet measured.
type shardedRun struct {
	threeSynced, balanced                time.Duration
	maxHeap, maxRSSRatio, maxPeak        float64
	maxSpans                             float64 // heap spans in use, the largest of the three
	perReplica, owners                   string
	fanPage50, fanPage99                 time.Duration
	fanNode50, fanNode99                 time.Duration
	fanWatch50, fanWatch99               time.Duration
	watchCluster, watchOwner             string
	killOwned, killServed, slowestRelist time.Duration
	moved                                int
	// killPeak is the larger of the two survivors' peak RSS (VmHWM, over their lives) once
	// every cluster was served again.
	killPeak             float64
	slowestRelistCluster string
	// killCPU is where the CPU went from the kill until every cluster was served, and from
	// their owners' return until then (the relists): the survivors', the API servers' (with
	// etcd) and the machine's busy share.
	killCPU string
	// The rolling restart (scaleFleet.rolling): how long it took, and the full lists (LIST
	// without continue, and watch-lists) the API servers served the replicas meanwhile.
	rollTook    time.Duration
	rollLists   int
	rollDetail  string
	rollOwners  string
	rollSettles []time.Duration
}

// scaleRound is what one round of S1 measured.
type scaleRound struct {
	singleRun
	shardedRun
}

// scaleFleet is a seeded fleet of API servers, each seen through aliases, and a daemon
// configuration over it.
type scaleFleet struct {
	b                 *testing.B
	ctx               context.Context
	f                 *fleet.Fleet
	bin               string
	names             []string // the aliases: the daemon's clusters
	clusters, objects int      // clusters, and objects over all of them
	perServer         int      // objects seeded in each API server
	servers, aliases  int
	nodes             int
	cfgPath           string
	writers           map[string]kubernetes.Interface
	mgmt              kubernetes.Interface
	seedTook          time.Duration
	queries, writes   int
	writeRate         float64
	rnd               *rand.Rand
	// rolling also restarts the three replicas, one at a time, before the kill.
	rolling bool
	// extraArgs are flags added to every replica of the rounds that set them (an A/B run).
	extraArgs []string
	// profileDir, when set, receives a CPU profile of the first round's single replica over
	// the profileFor from its start (sf.profile); the round waits for it.
	profileDir string
}

// profileFor bounds the CPU profile of a single replica's sync; killProfileFor, a survivor's
// after a kill.
const profileFor, killProfileFor = 120 * time.Second, 40 * time.Second

// scaleLatencyNS is the namespace, in every API server, of the write → watch probe's writes.
const scaleLatencyNS = "s1-latency"

// scaleLease is the lease duration of the sharded replicas.
const scaleLease = 15 * time.Second

// newScaleFleet starts servers API servers, bulk-seeds per objects (half Pods, half
// ConfigMaps) into each, and writes aliases contexts for each: servers × aliases clusters.
func newScaleFleet(b *testing.B, servers, aliases, per int, audit bool) *scaleFleet {
	b.Helper()
	env := harness.Start(b, harness.Options{Clusters: servers, Timeout: 5 * time.Hour, AuditReads: audit})
	ctx, f, loader := env.Ctx, env.Fleet, env.Loader
	sf := &scaleFleet{b: b, ctx: ctx, f: f, bin: harness.Binary(b), perServer: per, servers: servers, aliases: aliases,
		queries:   harness.EnvInt("MULTICACHE_BENCH_SCALE_QUERIES", 200),
		writes:    harness.EnvInt("MULTICACHE_BENCH_SCALE_WRITES", 500),
		writeRate: float64(harness.EnvInt("MULTICACHE_BENCH_SCALE_WRITE_RATE", 25)),
		rnd:       rand.New(rand.NewPCG(1, 2)), writers: map[string]kubernetes.Interface{}}
	const namespaces = 10
	perNS := per / 2 / namespaces
	sf.nodes = max(1, perNS*namespaces/10)
	seedStart := time.Now()
	n, err := loader.BulkSeed(ctx, fleet.BulkSpec{Namespaces: namespaces, PodsPerNamespace: perNS, ConfigMapsPerNamespace: perNS, Nodes: sf.nodes})
	if err != nil {
		b.Fatal(err)
	}
	sf.seedTook = time.Since(seedStart)
	sf.perServer = n
	b.Logf("bulk-seeded %d objects in each of %d API servers in %s", n, servers, sf.seedTook.Round(time.Second))
	dir := b.TempDir()
	aliasPath := filepath.Join(dir, "aliases.kubeconfig")
	if sf.names, err = f.WriteAliases(aliasPath, aliases); err != nil {
		b.Fatal(err)
	}
	sf.clusters, sf.objects = len(sf.names), n*len(sf.names)
	sf.cfgPath = filepath.Join(dir, "multicache.yaml")
	if err := os.WriteFile(sf.cfgPath, []byte(fmt.Sprintf(scaleConfig, aliasPath)), 0o600); err != nil {
		b.Fatal(err)
	}
	for _, name := range f.Names() {
		cs, err := f.Clientset(name)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleLatencyNS}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		sf.writers[name] = cs
	}
	sf.mgmt = sf.writers[f.Names()[0]]
	return sf
}

func (sf *scaleFleet) page(int) string { return "/api/v1/pods?limit=500" }

func (sf *scaleFleet) byNode(int) string {
	return "/api/v1/pods?limit=500&fieldSelector=spec.nodeName%3D" + fleet.NodeName(sf.rnd.IntN(sf.nodes))
}

// waitAll waits until p reports every cluster synced and ok (when not nil) holds of the
// owners, and returns how long that took.
func (sf *scaleFleet) waitAll(what string, p *scaleProc, within time.Duration, ok func(map[string]string) bool) time.Duration {
	b := sf.b
	start := time.Now()
	for {
		if s, _ := p.synced(); len(s) == sf.clusters && (ok == nil || ok(s)) {
			return time.Since(start)
		}
		if time.Since(start) > within {
			log, _ := os.ReadFile(p.log)
			b.Fatalf("%s: not within %s; %s's log:\n%s", what, within, p.id, tail(string(log), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// single starts one replica over the fleet, measures it once every cluster synced, and stops
// it.
func (sf *scaleFleet) single(k int, label string) singleRun {
	b, ctx := sf.b, sf.ctx
	var r singleRun
	start := time.Now()
	one := startScaleProc(b, sf.bin, fmt.Sprintf("%s-%d", label, k), harness.FreePort(b), "--config", sf.cfgPath)
	defer one.stop(syscall.SIGTERM)
	// The profile starts as soon as the daemon answers HTTP (it does before it is ready, which
	// is when every cluster synced), so that it covers the initial sync.
	profiled := make(chan struct{})
	if sf.profileDir != "" && k == 1 {
		go func() {
			defer close(profiled)
			for {
				if _, _, err := one.get("/healthz"); err == nil || time.Since(start) > time.Minute {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			sf.profile(one, filepath.Join(sf.profileDir, label+"-sync.pprof"))
		}()
	} else {
		close(profiled)
	}
	for !one.ready() {
		if time.Since(start) > 30*time.Minute {
			b.Fatalf("%s: not ready in 30 minutes", one.id)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.oneReady = time.Since(start)
	sf.waitAll(one.id+": every cluster synced", one, 30*time.Minute, nil)
	r.oneSynced = time.Since(start)
	<-profiled
	// Once synced, the daemon collects and returns its sync's garbage to the OS (the
	// collector ran at syncGCPercent meanwhile); give it 15 s, as the replicas below get.
	time.Sleep(15 * time.Second)
	r.oneHeap, r.oneRSS, r.onePeak = one.memory(b)
	r.onePage50, r.onePage99 = one.latencies(b, sf.queries, sf.page)
	r.oneNode50, r.oneNode99 = one.latencies(b, sf.queries, sf.byNode)
	r.probe = sf.names[len(sf.names)/2]
	r.oneWatch50, r.oneWatch99 = watchLatency(b, ctx, one, r.probe, sf.writers[serverOf(r.probe)], scaleLatencyNS, fmt.Sprintf("%s-%d", label, k), sf.writes, sf.writeRate)
	b.Logf("round %d, %s (one replica, %d clusters): ready in %s, every cluster synced in %s, heap %s, RSS %s, peak RSS %s; page of 500 p50 %s p99 %s; by node p50 %s p99 %s; write → watch (%s) p50 %s p99 %s",
		k, one.id, sf.clusters, r.oneReady.Round(10*time.Millisecond), r.oneSynced.Round(10*time.Millisecond), gib(r.oneHeap), gib(r.oneRSS), gib(r.onePeak), r.onePage50, r.onePage99, r.oneNode50, r.oneNode99, r.probe, r.oneWatch50, r.oneWatch99)
	return r
}

// profile writes a CPU profile of p over the next profileFor (from its start: its initial
// sync, and the time after it when the sync takes less) to path.
func (sf *scaleFleet) profile(p *scaleProc, path string) { sf.profileOver(p, path, profileFor) }

// profileOver writes a CPU profile of p over the next d to path.
func (sf *scaleFleet) profileOver(p *scaleProc, path string, d time.Duration) {
	// Not p.get: its client gives up after a minute.
	resp, err := (&http.Client{Timeout: d + time.Minute}).Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", p.url, int(d/time.Second)))
	if err != nil {
		sf.b.Logf("%s: CPU profile: %v", p.id, err)
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		sf.b.Logf("%s: CPU profile: %d %v", p.id, resp.StatusCode, err)
		return
	}
	if err := os.WriteFile(path, body, 0o644); err != nil {
		sf.b.Logf("%s: CPU profile: %v", p.id, err)
		return
	}
	sf.b.Logf("%s: CPU profile of %s written to %s", p.id, d, path)
}

// replicaArgs are the flags of a sharded replica id listening on addr, its Leases in shardNS.
func (sf *scaleFleet) replicaArgs(shardNS, id, addr string) []string {
	args := []string{"--config", sf.cfgPath, "--sharding", "--management-kubeconfig", sf.f.Kubeconfig(),
		"--management-context", sf.f.Names()[0], "--sharding-namespace", shardNS, "--advertise-url", "http://" + addr, "--replica-id", id}
	// MULTICACHE_BENCH_SCALE_REPLICA_ARGS adds flags to every replica, for a check such as
	// --max-warmups; a run with it is not the default configuration.
	args = append(args, strings.Fields(os.Getenv("MULTICACHE_BENCH_SCALE_REPLICA_ARGS"))...)
	return append(args, sf.extraArgs...)
}

func (sf *scaleFleet) awaitReady(p *scaleProc, start time.Time) {
	for !p.ready() {
		if time.Since(start) > 30*time.Minute {
			sf.b.Fatalf("%s: not ready in 30 minutes", p.id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stableOwners waits, reading through p, until every cluster is synced, owned by one of
// live, each of live owns some, and the owners have held still for hold; it returns the
// owners and the count per owner.
func (sf *scaleFleet) stableOwners(what string, p *scaleProc, live []*scaleProc, hold time.Duration) (map[string]string, string) {
	ids := map[string]bool{}
	for _, q := range live {
		ids[q.id] = true
	}
	stable, since := "", time.Now()
	var owners map[string]string
	var count map[string]int
	sf.waitAll(what, p, 30*time.Minute, func(s map[string]string) bool {
		count = map[string]int{}
		for _, o := range s {
			if !ids[o] {
				stable = ""
				return false
			}
			count[o]++
		}
		now := fmt.Sprint(s) // fmt prints a map sorted by key
		if now != stable {
			stable, since = now, time.Now()
		}
		owners = s
		return len(count) == len(live) && time.Since(since) > hold
	})
	return owners, fmt.Sprint(count)
}

// memberReads sums, over the fleet's API servers, the full lists of the cached resources
// (LIST without continue, and watch-lists) the daemons asked for so far, from their audit
// logs.
func (sf *scaleFleet) memberReads() (int, fleet.Reads) {
	total := fleet.Reads{Full: map[string]int{}}
	for _, name := range sf.f.Names() {
		c, err := sf.f.Cluster(name)
		if err != nil {
			sf.b.Fatal(err)
		}
		r, err := c.ReadsBy("multicache/")
		if err != nil {
			sf.b.Fatal(err)
		}
		total.Lists += r.Lists
		total.ListPages += r.ListPages
		total.Probes += r.Probes
		total.ExactLists += r.ExactLists
		total.WatchLists += r.WatchLists
		total.Watches += r.Watches
		for k, v := range r.Full {
			total.Full[k] += v
		}
	}
	return total.Full["pods"] + total.Full["configmaps"], total
}

// sharded starts three replicas sharding the fleet over Leases in the first API server,
// measures them once the owners held still, restarts them one at a time when sf.rolling,
// kills one and times its clusters' return. probe is the single replica's probe cluster.
func (sf *scaleFleet) sharded(k int, probe string) shardedRun {
	b, ctx := sf.b, sf.ctx
	var r shardedRun
	// The Leases go into a namespace of this round's own so that no earlier round's counts.
	shardNS := fmt.Sprintf("multicache-bench-%d", k)
	if _, err := sf.mgmt.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shardNS}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	var rs []*scaleProc
	for _, id := range []string{"r1", "r2", "r3"} {
		addr := harness.FreePort(b)
		rs = append(rs, startScaleProc(b, sf.bin, id, addr, sf.replicaArgs(shardNS, id, addr)...))
	}
	defer func() {
		for _, p := range rs {
			p.stop(syscall.SIGTERM)
		}
	}()
	for _, p := range rs {
		sf.awaitReady(p, start)
	}
	sf.waitAll("three replicas: every cluster synced", rs[0], 30*time.Minute, nil)
	r.threeSynced = time.Since(start)
	// Balanced: each replica owns a share, and the owners hold still for 3 lease durations.
	owners, count := sf.stableOwners("three replicas: ownership shared and stable", rs[0], rs, 3*scaleLease)
	r.balanced, r.owners = time.Since(start), count
	// A replica returns the memory moves freed once they have been quiet for 15 s and the
	// states it handed off are taken (returnMemoryAfterMoves); the owners have held still for
	// 45 s: give it 15 s more.
	time.Sleep(15 * time.Second)
	var lines []string
	for _, p := range rs {
		h, rss, peak := p.memory(b)
		r.maxHeap, r.maxRSSRatio, r.maxPeak = max(r.maxHeap, h), max(r.maxRSSRatio, rss/h), max(r.maxPeak, peak)
		r.maxSpans = max(r.maxSpans, p.lastInuse)
		lines = append(lines, fmt.Sprintf("%s heap %s (spans in use %s, free spans not returned to the OS %s, last returned %s before) RSS %s peak RSS %s", p.id, gib(h), gib(p.lastInuse), gib(p.lastIdle-p.lastReleased), p.lastReturn, gib(rss), gib(peak)))
	}
	r.perReplica = strings.Join(lines, ", ")
	r.fanPage50, r.fanPage99 = rs[0].latencies(b, sf.queries, sf.page)
	r.fanNode50, r.fanNode99 = rs[0].latencies(b, sf.queries, sf.byNode)
	// The probe's cluster is one r1 does not own (r1 serves it from its owner): an alias of
	// the one replica's probe's API server when there is one, so that both probes read the
	// same server.
	for _, c := range sf.names {
		if o := owners[c]; o != "" && o != rs[0].id && (r.watchCluster == "" || serverOf(c) == serverOf(probe) && serverOf(r.watchCluster) != serverOf(probe)) {
			r.watchCluster, r.watchOwner = c, o
		}
	}
	if r.watchCluster == "" {
		b.Fatalf("round %d: r1 owns every cluster: %v", k, owners)
	}
	r.fanWatch50, r.fanWatch99 = watchLatency(b, ctx, rs[0], r.watchCluster, sf.writers[serverOf(r.watchCluster)], scaleLatencyNS, fmt.Sprintf("three-%d", k), sf.writes, sf.writeRate)
	b.Logf("round %d, three replicas: every cluster synced %s after start, shared and stable %s after; %s; page of 500 through r1 p50 %s p99 %s; by node p50 %s p99 %s; write → watch through r1 (%s, owned by %s) p50 %s p99 %s; owners %s",
		k, r.threeSynced.Round(10*time.Millisecond), r.balanced.Round(10*time.Millisecond), r.perReplica, r.fanPage50, r.fanPage99, r.fanNode50, r.fanNode99, r.watchCluster, r.watchOwner, r.fanWatch50, r.fanWatch99, r.owners)

	if sf.rolling {
		owners = sf.roll(k, shardNS, rs, &r)
	}

	// Kill one: its clusters are owned, then served, by the others.
	killed := rs[2]
	var theirs []string
	for c, o := range owners {
		if o == killed.id {
			theirs = append(theirs, c)
		}
	}
	r.moved = len(theirs)
	// CPU taken from a point on: the survivors, the API servers and etcd, the machine.
	type cpuMark struct {
		at                      time.Time
		survivors, servers, all time.Duration
	}
	mark := func() cpuMark {
		return cpuMark{time.Now(), procCPU(rs[0].cmd.Process.Pid) + procCPU(rs[1].cmd.Process.Pid), cpuOf(sf.f.PIDs()), ceilingBusy()}
	}
	since := func(from, to cpuMark) string {
		wall := to.at.Sub(from.at)
		return fmt.Sprintf("%s: survivors %.1f s, API servers %.1f s, machine busy %.0f%% of %d cores",
			wall.Round(100*time.Millisecond), (to.survivors - from.survivors).Seconds(), (to.servers - from.servers).Seconds(),
			100*(to.all-from.all).Seconds()/wall.Seconds()/float64(runtime.NumCPU()), runtime.NumCPU())
	}
	killed.stop(syscall.SIGKILL)
	atKill := mark()
	// The first round's kill is profiled at one survivor, from the kill until about when
	// every cluster is served again.
	profiled := make(chan struct{})
	if sf.profileDir != "" && k == 1 {
		go func() {
			defer close(profiled)
			sf.profileOver(rs[0], filepath.Join(sf.profileDir, "s2-kill-"+rs[0].id+".pprof"), killProfileFor)
		}()
	} else {
		close(profiled)
	}
	defer func() { <-profiled }()
	kill := atKill.at
	var atOwned cpuMark
	for {
		all := rs[0].clusters()
		owned := len(all) == sf.clusters
		for _, c := range theirs {
			if o := all[c].Owner; o == "" || o == killed.id {
				owned = false
			}
		}
		if owned && r.killOwned == 0 {
			r.killOwned = time.Since(kill)
			atOwned = mark()
		}
		served := owned
		for _, c := range all {
			if c.State != "Synced" || c.Owner == killed.id {
				served = false
			}
		}
		if served {
			r.killServed = time.Since(kill)
			atServed := mark()
			r.killCPU = fmt.Sprintf("kill → served %s; owned → served %s", since(atKill, atServed), since(atOwned, atServed))
			break
		}
		if time.Since(kill) > 10*time.Minute {
			log, _ := os.ReadFile(rs[0].log)
			b.Fatalf("round %d: not every cluster served 10 minutes after %s was killed; %s's log:\n%s", k, killed.id, rs[0].id, tail(string(log), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The slowest relist: the longest initial list at a survivor of a cluster the killed
	// replica had.
	for _, p := range rs[:2] {
		secs := p.syncSeconds(b)
		for _, c := range theirs {
			if d := time.Duration(secs[c] * float64(time.Second)); d > r.slowestRelist {
				r.slowestRelist, r.slowestRelistCluster = d, c
			}
		}
	}
	for _, p := range rs[:2] {
		_, _, peak := p.memory(b)
		r.killPeak = max(r.killPeak, peak)
	}
	b.Logf("round %d, %s killed: its %d clusters owned again in %s, every cluster served in %s; slowest relist %s (%s; lease duration %s); CPU %s; survivors' peak RSS %s",
		k, killed.id, r.moved, r.killOwned.Round(10*time.Millisecond), r.killServed.Round(10*time.Millisecond), r.slowestRelist.Round(10*time.Millisecond), r.slowestRelistCluster, scaleLease, r.killCPU, gib(r.killPeak))
	return r
}

// roll restarts the three replicas one at a time, as a Deployment's rolling update does
// (maxSurge 1): a new replica, under a new name and address, starts beside the old one; once
// the four have shared the fleet and held still for a lease duration, the old one stops
// (SIGTERM) and the three share it again. It counts the full lists the API servers served the
// replicas meanwhile (every move hands the cluster's cache over, so the goal is none), and
// replaces rs's entries with the new replicas. It returns the final owners.
func (sf *scaleFleet) roll(k int, shardNS string, rs []*scaleProc, r *shardedRun) map[string]string {
	b := sf.b
	before, beforeDetail := sf.memberReads()
	start := time.Now()
	var owners map[string]string
	procs := slices.Clone(rs) // every replica of the restart, whose logs say why a handover fell back
	for i := range rs {
		old := rs[i]
		step := time.Now()
		addr := harness.FreePort(b)
		next := startScaleProc(b, sf.bin, old.id+"-next", addr, sf.replicaArgs(shardNS, old.id+"-next", addr)...)
		procs = append(procs, next)
		sf.awaitReady(next, step)
		var live []*scaleProc
		for _, p := range rs {
			if p != old {
				live = append(live, p)
			}
		}
		reader := live[0]
		sf.stableOwners(next.id+" beside "+old.id+": ownership shared and stable", reader, slices.Concat(live, []*scaleProc{old, next}), scaleLease)
		old.stop(syscall.SIGTERM)
		rs[i] = next
		owners, r.rollOwners = sf.stableOwners("after "+old.id+" stopped: ownership shared and stable", reader, slices.Concat(live, []*scaleProc{next}), scaleLease)
		r.rollSettles = append(r.rollSettles, time.Since(step))
	}
	r.rollTook = time.Since(start)
	after, afterDetail := sf.memberReads()
	r.rollLists = after - before
	d := afterDetail.Sub(beforeDetail)
	r.rollDetail = fmt.Sprintf("full lists %v; lists %d, pages %d, watch-lists %d, limit=1 probes %d, other watches %d", d.Full, d.Lists, d.ListPages, d.WatchLists, d.Probes, d.Watches)
	b.Logf("round %d, rolling restart of the three: %s (each step %v), owners %s; the API servers served the replicas %d full lists (%.2f× one fleet list of %d); %s",
		k, r.rollTook.Round(100*time.Millisecond), r.rollSettles, r.rollOwners, r.rollLists, float64(r.rollLists)/float64(2*sf.clusters), 2*sf.clusters, r.rollDetail)
	if r.rollLists > 0 {
		keepLogs(b, fmt.Sprintf("round%d-roll", k), procs)
	}
	return owners
}

// keepLogs copies the logs of procs, which go with the benchmark's temporary directories, to
// MULTICACHE_BENCH_PROFILE_DIR (or a directory of their own) as <what>-<id>.log: the evidence
// of a round that missed a goal. Replicas log at warn unless MULTICACHE_BENCH_SCALE_REPLICA_ARGS
// says otherwise (--log-level info names each handover that fell back to a list).
func keepLogs(b *testing.B, what string, procs []*scaleProc) {
	b.Helper()
	dir := os.Getenv("MULTICACHE_BENCH_PROFILE_DIR")
	if dir == "" {
		d, err := os.MkdirTemp("", "multicache-bench-logs-")
		if err != nil {
			b.Logf("%s: the replicas' logs cannot be kept: %v", what, err)
			return
		}
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Logf("%s: the replicas' logs cannot be kept: %v", what, err)
		return
	}
	for _, p := range procs {
		data, err := os.ReadFile(p.log)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, what+"-"+p.id+".log"), data, 0o644)
		}
		if err != nil {
			b.Logf("%s: %s's log not kept: %v", what, p.id, err)
		}
	}
	b.Logf("%s: the replicas' logs are kept in %s", what, dir)
}

// BenchmarkFleetScale (S1): 100 clusters × 20k objects (5 API servers × 20 contexts each),
// on one replica, then on 3 replicas sharded over Leases, in rounds on one seeded fleet.
func BenchmarkFleetScale(b *testing.B) {
	servers := harness.EnvInt("MULTICACHE_BENCH_SCALE_SERVERS", 5)
	aliases := harness.EnvInt("MULTICACHE_BENCH_SCALE_ALIASES", 20)
	per := harness.EnvInt("MULTICACHE_BENCH_SCALE_OBJECTS", 20000)
	rounds := harness.EnvInt("MULTICACHE_BENCH_SCALE_RUNS", 5)
	sf := newScaleFleet(b, servers, aliases, per, false)
	clusters, objects, n, queries, writes, writeRate, seedTook := sf.clusters, sf.objects, sf.perServer, sf.queries, sf.writes, sf.writeRate, sf.seedTook
	lease := scaleLease
	round := func(k int) scaleRound {
		one := sf.single(k, "single")
		return scaleRound{one, sf.sharded(k, one.probe)}
	}
	runStart := time.Now()
	var rr []scaleRound
	for k := 1; k <= rounds; k++ {
		rr = append(rr, round(k))
	}
	roundTook := time.Since(runStart) / time.Duration(rounds)

	col := func(get func(scaleRound) float64) []float64 { return column(rr, get) }
	dur := func(get func(scaleRound) time.Duration) []float64 {
		return col(func(r scaleRound) float64 { return get(r).Seconds() })
	}
	ms := func(get func(scaleRound) time.Duration) string {
		return ceilingSpread(col(func(r scaleRound) float64 { return float64(get(r)) / float64(time.Millisecond) }), "%.0f ms")
	}
	secs := func(get func(scaleRound) time.Duration) string { return ceilingSpread(dur(get), "%.1f s") }
	heapRatio := col(func(r scaleRound) float64 { return r.maxHeap / r.oneHeap })
	rssRatio := col(func(r scaleRound) float64 { return r.maxRSSRatio })
	oneRSSRatio := col(func(r scaleRound) float64 { return r.oneRSS / r.oneHeap })
	pageRatio := col(func(r scaleRound) float64 { return float64(r.fanPage99) / float64(r.onePage99) })
	nodeRatio := col(func(r scaleRound) float64 { return float64(r.fanNode99) / float64(r.oneNode99) })
	watchRatio := col(func(r scaleRound) float64 { return float64(r.fanWatch99) / float64(r.oneWatch99) })
	budget := col(func(r scaleRound) float64 { return (2*lease + r.slowestRelist).Seconds() })
	served := dur(func(r scaleRound) time.Duration { return r.killServed })
	owned := dur(func(r scaleRound) time.Duration { return r.killOwned })
	var rows []string
	for i, r := range rr {
		rows = append(rows, fmt.Sprintf("| %d | %s | %s | %.2f× | %.2f | %.2f× | %.2f× | %s / %s | %s / %s | %s, %s, %s (%d clusters, slowest relist %s) | %s |",
			i+1, gib(r.oneHeap), gib(r.maxHeap), r.maxHeap/r.oneHeap, r.maxRSSRatio, float64(r.fanPage99)/float64(r.onePage99), float64(r.fanWatch99)/float64(r.oneWatch99),
			r.oneWatch50.Round(time.Millisecond), r.oneWatch99.Round(time.Millisecond), r.fanWatch50.Round(time.Millisecond), r.fanWatch99.Round(time.Millisecond),
			r.killOwned.Round(100*time.Millisecond), r.killServed.Round(100*time.Millisecond), (2*lease+r.slowestRelist).Round(100*time.Millisecond), r.moved, r.slowestRelist.Round(100*time.Millisecond), r.owners))
	}
	note := fmt.Sprintf("median (min–max) of %d rounds", rounds)
	recordGoals(b,
		goal{ID: "S1", Figure: "2M objects / 100 clusters, 3 replicas: heap of the largest replica ÷ one replica's", Goal: "≤ 0.4×",
			Measured: ceilingSpread(heapRatio, "%.2f×") + "; " + note, Met: met(median(heapRatio) <= 0.4)},
		goal{ID: "S1", Figure: "the same: RSS ÷ heap per replica, largest", Goal: "≤ 1.5×",
			Measured: ceilingSpread(rssRatio, "%.2f×") + "; " + note, Met: met(median(rssRatio) <= 1.5)},
		goal{ID: "S1", Figure: "fleet list page of 500 through a non-owner, p99 ÷ one replica's", Goal: "≤ 3×",
			Measured: ceilingSpread(pageRatio, "%.2f×") + "; " + note, Met: met(median(pageRatio) <= 3)},
		goal{ID: "S1", Figure: "kill one of 3 replicas (lease 15 s): every cluster served again", Goal: "≤ 2 lease durations + the slowest relist",
			Measured: fmt.Sprintf("%s against %s; %s", ceilingSpread(served, "%.1f s"), ceilingSpread(budget, "%.1f s"), note), Met: met(median(served) <= median(budget))},
		goal{ID: "S1", Figure: "write → watch p99 through a non-owner ÷ on one replica, at a steady write rate", Goal: "—",
			Measured: fmt.Sprintf("%s (%s vs %s); %s", ceilingSpread(watchRatio, "%.2f×"), ms(func(r scaleRound) time.Duration { return r.fanWatch99 }), ms(func(r scaleRound) time.Duration { return r.oneWatch99 }), note), Met: "—"},
	)
	writeSection(b, "S1: a hundred clusters, one replica and three", fmt.Sprintf(`%s

%d clusters × %d objects (%d in all, half Pods, half ConfigMaps): %d kube-apiservers bulk-seeded
with %d objects each, every one seen through %d kubeconfig contexts (fleet.WriteAliases), each
context a cluster of its own to the daemon. The API servers are shared: this measures the
daemon's memory, sync, queries and moves, not the load of %d separate API servers, and the
API servers' CPU competes with the daemons' on the same cores.

The fleet is seeded once (%s); then %d rounds, each about %s: one replica starts, syncs, is
measured and stops; then three replicas shard the fleet over Leases (a namespace of the
round's own in the first API server), are measured once the owners have held still for three
lease durations (and 15 s more, for a replica to return the memory its moves freed), and one
is killed with SIGKILL. Medians (min–max) over the rounds. Memory is read 15 s after every
cluster synced (one replica) or after the owners held still (three): heap is the live heap
right after a forced collection, RSS the resident set then, and peak RSS the most the process
held at any time (VmHWM), its initial sync included.

Queries: %d GETs each, read whole, through r1 (which owns about a third of the clusters and
reads the rest from their owners). Write → watch: %d ConfigMaps created at %.0f/s in one
API server, each timed from just before its create to its ADDED event on a watch of one of
that server's aliases, read through the single replica, and through r1 for an alias that
another replica owns. Kill: the time until every cluster r3 owned shows a survivor as its
owner, and until every cluster is synced again; the slowest relist is the longest initial
list (multicache_initial_sync_seconds) at a survivor of a cluster r3 had. A survivor lists its
share of them 4 at a time (--max-warmups), so "served" also counts that queue.

| figure | one replica | three replicas (sharded, lease %s) | ratio | goal |
|---|---|---|---|---|
| heap (of the three, the largest) | %s | %s | %s | ≤ 0.4× |
| RSS ÷ heap (of the three, the largest ratio) | %s | %s | | ≤ 1.5 |
| peak RSS (VmHWM; of the three, the largest) | %s | %s | | |
| start → every cluster synced | %s (ready %s) | %s (shared and stable after %s) | | |
| fleet list page of 500, p50 | %s | %s | | |
| fleet list page of 500, p99 | %s | %s | %s | ≤ 3× |
| index query (spec.nodeName, ≤ 500), p50 / p99 | %s / %s | %s / %s | %s p99 | |
| write → watch, p50 | %s | %s (through a non-owner) | | |
| write → watch, p99 | %s | %s (through a non-owner) | %s | |
| one replica killed: its clusters owned by survivors | | %s | | |
| one replica killed: every cluster served again | | %s | | ≤ 2 lease durations + the slowest relist: %s |

Each round:

| round | heap, one | heap, largest of three | ratio | RSS ÷ heap, largest | page p99 ratio | write → watch p99 ratio | write → watch p50 / p99, one | the same through a non-owner | kill: owned, served, budget | owners |
|---|---|---|---|---|---|---|---|---|---|---|
%s

Last round, per replica: %s.

Command: `+"`make bench-scale`"+` (`+"`MULTICACHE_BENCH_SCALE_RUNS=%d go test -run '^$' -bench 'FleetScale$$' -benchtime 1x -timeout 5h -v ./test/bench/`"+`)
`, machineLine(), clusters, n, objects, servers, n, aliases, clusters, seedTook.Round(time.Second), rounds, roundTook.Round(time.Second),
		queries, writes, writeRate, lease,
		ceilingSpread(col(func(r scaleRound) float64 { return r.oneHeap / (1 << 30) }), "%.2f GiB"), ceilingSpread(col(func(r scaleRound) float64 { return r.maxHeap / (1 << 30) }), "%.2f GiB"), ceilingSpread(heapRatio, "%.2f×"),
		ceilingSpread(oneRSSRatio, "%.2f"), ceilingSpread(rssRatio, "%.2f"),
		ceilingSpread(col(func(r scaleRound) float64 { return r.onePeak / (1 << 30) }), "%.2f GiB"), ceilingSpread(col(func(r scaleRound) float64 { return r.maxPeak / (1 << 30) }), "%.2f GiB"),
		secs(func(r scaleRound) time.Duration { return r.oneSynced }), secs(func(r scaleRound) time.Duration { return r.oneReady }),
		secs(func(r scaleRound) time.Duration { return r.threeSynced }), secs(func(r scaleRound) time.Duration { return r.balanced }),
		ms(func(r scaleRound) time.Duration { return r.onePage50 }), ms(func(r scaleRound) time.Duration { return r.fanPage50 }),
		ms(func(r scaleRound) time.Duration { return r.onePage99 }), ms(func(r scaleRound) time.Duration { return r.fanPage99 }), ceilingSpread(pageRatio, "%.2f×"),
		ms(func(r scaleRound) time.Duration { return r.oneNode50 }), ms(func(r scaleRound) time.Duration { return r.oneNode99 }),
		ms(func(r scaleRound) time.Duration { return r.fanNode50 }), ms(func(r scaleRound) time.Duration { return r.fanNode99 }), ceilingSpread(nodeRatio, "%.2f×"),
		ms(func(r scaleRound) time.Duration { return r.oneWatch50 }), ms(func(r scaleRound) time.Duration { return r.fanWatch50 }),
		ms(func(r scaleRound) time.Duration { return r.oneWatch99 }), ms(func(r scaleRound) time.Duration { return r.fanWatch99 }), ceilingSpread(watchRatio, "%.2f×"),
		ceilingSpread(owned, "%.1f s"), ceilingSpread(served, "%.1f s"), ceilingSpread(budget, "%.1f s"),
		strings.Join(rows, "\n"), rr[len(rr)-1].perReplica, rounds))
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
