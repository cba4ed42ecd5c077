package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// kubectlRun is one measured `kubectl get`: through the daemon (one process) or the fan-out
// (one process per cluster, in parallel).
type kubectlRun struct {
	wall       time.Duration
	sent, recv int64         // bytes on the wire, both directions, summed over the proxies
	clientCPU  time.Duration // user+system time of the kubectl processes
	serverCPU  time.Duration // user+system time of the daemon, or of every API server and etcd
	rows       []string      // "cluster namespace name ready status restarts", sorted
}

// procCPU is the user+system time pid has used, from /proc/pid/stat (clock ticks of 10 ms).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces; fields after its closing parenthesis start at state (3).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func cpuOf(pids []int) (d time.Duration) {
	for _, p := range pids {
		d += procCPU(p)
	}
	return d
}

// kubectlRows parses kubectl's default table into rows "cluster namespace name ready status
// restarts". Through the daemon the table has a CLUSTER column (with -A kubectl puts its own
// NAMESPACE column before the server's first one); from one API server it has none and cluster
// names the server. AGE, the last column, is left out: it changes between runs.
func kubectlRows(out, cluster string) ([]string, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || lines[0] == "" {
		return nil, nil
	}
	header := strings.Fields(lines[0])
	want := []string{"NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"}
	if cluster == "" {
		want = append([]string{"NAMESPACE", "CLUSTER"}, want[1:]...)
	}
	if strings.Join(header, " ") != strings.Join(want, " ") {
		return nil, fmt.Errorf("header %q, want %q", lines[0], want)
	}
	rows := make([]string, 0, len(lines)-1)
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != len(want) {
			return nil, fmt.Errorf("row %q: %d cells, want %d", l, len(f), len(want))
		}
		if cluster != "" {
			f = append([]string{cluster}, f...)
		} else {
			f[0], f[1] = f[1], f[0]
		}
		rows = append(rows, strings.Join(f[:len(f)-1], " "))
	}
	return rows, nil
}

// BenchmarkKubectl measures `kubectl get pods -A -l SEL` through the daemon's Kubernetes API
// against a fan-out of the same kubectl to every API server (one process per cluster, run in
// parallel), on 3 clusters of bulk-seeded Pods: wall time, bytes on the wire (counted by a
// TCP proxy in front of every server), and the CPU of the clients and of the servers. Both
// answers must hold the same rows.
//
//	MULTICACHE_BENCH_KUBECTL_PODS=20000 MULTICACHE_BENCH_KUBECTL_RUNS=7 go test -run '^$' -bench Kubectl -benchtime 1x -timeout 30m ./test/bench/
func BenchmarkKubectl(b *testing.B) {
	perCluster := harness.EnvInt("MULTICACHE_BENCH_KUBECTL_PODS", 20000)
	runs := harness.EnvInt("MULTICACHE_BENCH_KUBECTL_RUNS", 7)
	const namespaces = 10
	bin := filepath.Join(fleet.DefaultBinDir(), "kubectl")
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("kubectl: %v (make tools builds it)", err)
	}
	env := harness.Start(b, harness.Options{Clusters: 3, Timeout: time.Hour})
	ctx, f := env.Ctx, env.Fleet
	spec := fleet.BulkSpec{Namespaces: namespaces, PodsPerNamespace: perCluster / namespaces, ConfigMapsPerNamespace: 1, Nodes: 100}
	if _, err := env.Loader.BulkSeed(ctx, spec); err != nil {
		b.Fatal(err)
	}

	// Every server behind a counting proxy; kubectl reaches them only through it.
	dir := b.TempDir()
	kc, err := clientcmd.LoadFromFile(f.Kubeconfig())
	if err != nil {
		b.Fatal(err)
	}
	var apiProxies []*fleet.Proxy
	for name, c := range kc.Clusters {
		p, err := fleet.NewProxy(strings.TrimPrefix(c.Server, "https://"))
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		apiProxies = append(apiProxies, p)
		kc.Clusters[name].Server = p.URL()
	}
	fanoutConfig := filepath.Join(dir, "fanout.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, fanoutConfig); err != nil {
		b.Fatal(err)
	}
	d := harness.StartDaemon(b, "--kubeconfig", f.Kubeconfig(), "--resource", "pods")
	dp, err := fleet.NewProxy(strings.TrimPrefix(d.URL, "http://"))
	if err != nil {
		b.Fatal(err)
	}
	defer dp.Close()
	serverPIDs := f.PIDs()
	contexts := f.Names()

	kubectl := func(args ...string) (string, time.Duration, error) {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG=/dev/null")
		var out, errs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errs
		if err := cmd.Run(); err != nil {
			return "", 0, fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, errs.String())
		}
		return out.String(), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
	}
	bytesOf := func(ps ...*fleet.Proxy) (sent, recv int64) {
		for _, p := range ps {
			s, r := p.Bytes()
			sent, recv = sent+s, recv+r
		}
		return sent, recv
	}
	// Discovery is cached per target in its own directory, warm after the first run (not
	// counted), as for a user who runs kubectl more than once.
	viaDaemon := func(sel, chunk string) (kubectlRun, error) {
		s0, r0 := dp.Bytes()
		c0 := procCPU(d.Cmd.Process.Pid)
		start := time.Now()
		out, cpu, err := kubectl("--server", "http://"+dp.Addr(), "--cache-dir", filepath.Join(dir, "cache-daemon"),
			"get", "pods", "-A", "-l", sel, "--chunk-size", chunk)
		wall := time.Since(start)
		if err != nil {
			return kubectlRun{}, err
		}
		s1, r1 := dp.Bytes()
		rows, err := kubectlRows(out, "")
		sort.Strings(rows)
		return kubectlRun{wall: wall, sent: s1 - s0, recv: r1 - r0, clientCPU: cpu, serverCPU: procCPU(d.Cmd.Process.Pid) - c0, rows: rows}, err
	}
	fanout := func(sel, chunk string) (kubectlRun, error) {
		s0, r0 := bytesOf(apiProxies...)
		c0 := cpuOf(serverPIDs)
		var mu sync.Mutex
		var run kubectlRun
		var firstErr error
		var wg sync.WaitGroup
		start := time.Now()
		for _, name := range contexts {
			wg.Go(func() {
				out, cpu, err := kubectl("--kubeconfig", fanoutConfig, "--context", name, "--cache-dir", filepath.Join(dir, "cache-fanout"),
					"get", "pods", "-A", "-l", sel, "--chunk-size", chunk)
				var rows []string
				if err == nil {
					rows, err = kubectlRows(out, name)
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				run.rows = append(run.rows, rows...)
				run.clientCPU += cpu
			})
		}
		wg.Wait()
		run.wall = time.Since(start)
		s1, r1 := bytesOf(apiProxies...)
		run.sent, run.recv, run.serverCPU = s1-s0, r1-r0, cpuOf(serverPIDs)-c0
		sort.Strings(run.rows)
		return run, firstErr
	}

	selectors := []struct{ sel, what string }{
		{"app=app-7", "1 Pod in 20"},
		{"tier=frontend", "1 Pod in 3"},
	}
	// kubectl pages by 500 unless told otherwise, and its client allows 5 requests/s after a
	// burst of 10 (client-go's defaults): a list of many pages waits on the client. Both
	// variants run as users type them, and with --chunk-size=0 (one request per server).
	type variant struct {
		daemon bool
		chunk  string
	}
	variants := []variant{{true, "500"}, {false, "500"}, {true, "0"}, {false, "0"}}
	var sb strings.Builder
	sb.WriteString("| selector | rows | variant | --chunk-size | wall | received | sent | kubectl CPU | server CPU |\n|---|---|---|---|---|---|---|---|---|\n")
	var ratios []string
	for _, s := range selectors {
		got := map[variant][]kubectlRun{}
		measure := func(v variant) (kubectlRun, error) {
			if v.daemon {
				return viaDaemon(s.sel, v.chunk)
			}
			return fanout(s.sel, v.chunk)
		}
		for _, v := range variants { // warm-up: discovery caches
			if _, err := measure(v); err != nil {
				b.Fatal(err)
			}
		}
		for i := range runs {
			for j := range variants { // rotating order
				v := variants[(i+j)%len(variants)]
				run, err := measure(v)
				if err != nil {
					b.Fatal(err)
				}
				got[v] = append(got[v], run)
			}
		}
		// Ground truth: the fan-out is what the API servers list. Every run of every variant
		// must agree.
		truth := got[variant{false, "500"}][0].rows
		if want := 3 * perCluster; len(truth) == 0 || len(truth) > want {
			b.Fatalf("%s: the API servers list %d Pods (of %d)", s.sel, len(truth), want)
		}
		for _, v := range variants {
			for i, r := range got[v] {
				if strings.Join(r.rows, "\n") != strings.Join(truth, "\n") {
					b.Fatalf("%s: run %d of %+v printed %d rows, the API servers %d, or other rows", s.sel, i, v, len(r.rows), len(truth))
				}
			}
		}
		type stat struct{ med, lo, hi float64 }
		of := func(v variant, x func(kubectlRun) float64) stat {
			var xs []float64
			for _, r := range got[v] {
				xs = append(xs, x(r))
			}
			sort.Float64s(xs)
			return stat{median(xs), xs[0], xs[len(xs)-1]}
		}
		wall := func(r kubectlRun) float64 { return r.wall.Seconds() * 1000 }
		recv := func(r kubectlRun) float64 { return float64(r.recv) / (1 << 20) }
		sent := func(r kubectlRun) float64 { return float64(r.sent) / (1 << 10) }
		ccpu := func(r kubectlRun) float64 { return r.clientCPU.Seconds() * 1000 }
		scpu := func(r kubectlRun) float64 { return r.serverCPU.Seconds() * 1000 }
		cell := func(st stat, unit string, prec int) string {
			return fmt.Sprintf("%.*f %s (%.*f–%.*f)", prec, st.med, unit, prec, st.lo, prec, st.hi)
		}
		for _, v := range variants {
			name := "fan-out: 3 kubectl, one per API server"
			if v.daemon {
				name = "one kubectl through multicache"
			}
			fmt.Fprintf(&sb, "| `%s` (%s) | %d | %s | %s | %s | %s | %s | %s | %s |\n", s.sel, s.what, len(truth), name, v.chunk,
				cell(of(v, wall), "ms", 0), cell(of(v, recv), "MiB", 2), cell(of(v, sent), "KiB", 1),
				cell(of(v, ccpu), "ms", 0), cell(of(v, scpu), "ms", 0))
		}
		for _, chunk := range []string{"500", "0"} {
			d, f := variant{true, chunk}, variant{false, chunk}
			ratios = append(ratios, fmt.Sprintf("`%s` --chunk-size=%s: wall %.2f×, bytes received %.2f×, server CPU %.2f×", s.sel, chunk,
				of(d, wall).med/of(f, wall).med, of(d, recv).med/of(f, recv).med, of(d, scpu).med/of(f, scpu).med))
		}
	}
	b.Log("\n" + sb.String() + "\nmulticache ÷ fan-out, medians: " + strings.Join(ratios, "; "))
	if os.Getenv("MULTICACHE_BENCH_WRITE") != "" {
		writeSection(b, "K1: kubectl get through the daemon vs a kubectl fan-out, 3 clusters", fmt.Sprintf(`%s

3 clusters of %d bulk-seeded Pods each (%d namespaces; labels app-0…app-19, tier
frontend/backend/cache), the daemon on them with `+"`--resource pods`"+`. For each selector,
`+"`kubectl get pods -A -l SEL`"+` runs through the daemon's Kubernetes API (one process, CLUSTER
column) and as a fan-out: one kubectl per cluster's API server, the three in parallel, the best a
script can do; each with kubectl's default paging (500) and with `+"`--chunk-size=0`"+`. All print
the same rows (checked on every run, less AGE). Each variant ran %d times, in rotating order;
median (min–max). kubectl's client allows 5 requests/s after a burst of 10 (client-go's
defaults), so a list of more than 10 pages waits on the client: through the daemon one
kubectl fetches every page, while the fan-out splits them over three clients. With
`+"`--chunk-size=0`"+` the daemon and each API server answer in one request. kubectl's discovery cache is warm (one
run before measuring). Bytes are counted by a TCP proxy in front of every server (TLS bytes for
the API servers, plain HTTP for the daemon). kubectl CPU sums the processes of a variant;
server CPU is the daemon's, or the 3 API servers' and 3 etcds' together, over the run (from
/proc, 10 ms ticks). Everything shares the machine's CPUs.

%s
multicache ÷ fan-out, medians: %s.

Command: `+"`MULTICACHE_BENCH_KUBECTL_PODS=%d MULTICACHE_BENCH_KUBECTL_RUNS=%d go test -run '^$' -bench Kubectl -benchtime 1x -timeout 30m ./test/bench/`"+`
`, machineLine(), perCluster, namespaces, runs, sb.String(), strings.Join(ratios, "; "), perCluster, runs))
	}
}
