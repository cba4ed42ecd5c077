package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/multicache/multicache/test/harness"
)

// S2.2: what one cluster × resource costs the daemon when the cluster is empty: the heap,
// goroutines, file descriptors and sockets that grow with the number of clusters, not with
// objects. A few real API servers, each seen through many kubeconfig contexts
// (fleet.WriteAliases), are the clusters, as in S1. The figure per cluster × resource is the
// slope between two widths, so that what the process costs at any width (its runtime, its
// listeners, the API servers' default objects) cancels out.

const fixedCostConfig = `kubeconfig:
  paths: [%q]
resources:
  - name: pods
  - name: configmaps
`

// fixedReading is one daemon's cost once every cluster synced.
type fixedReading struct {
	heap, goroutines, fds, sockets float64
	idleCPU                        float64 // CPU milliseconds per second while nothing changes
}

func BenchmarkFixedCost(b *testing.B) {
	servers := harness.EnvInt("MULTICACHE_BENCH_FIXED_SERVERS", 5)
	narrow := harness.EnvInt("MULTICACHE_BENCH_FIXED_NARROW", 60) // contexts per server
	wide := harness.EnvInt("MULTICACHE_BENCH_FIXED_WIDE", 200)
	rounds := harness.EnvInt("MULTICACHE_BENCH_FIXED_RUNS", 5)
	// MULTICACHE_BENCH_FIXED_GOROUTINES=DIR writes each daemon's goroutine profile there.
	const resources = 2
	bin := harness.Binary(b)
	env := harness.Start(b, harness.Options{Clusters: servers, Timeout: 3 * time.Hour})
	dir := b.TempDir()
	configs := map[int]string{}
	clusters := map[int]int{}
	for _, per := range []int{narrow, wide} {
		aliasPath := filepath.Join(dir, fmt.Sprintf("aliases-%d.kubeconfig", per))
		names, err := env.Fleet.WriteAliases(aliasPath, per)
		if err != nil {
			b.Fatal(err)
		}
		clusters[per] = len(names)
		configs[per] = filepath.Join(dir, fmt.Sprintf("multicache-%d.yaml", per))
		if err := os.WriteFile(configs[per], []byte(fmt.Sprintf(fixedCostConfig, aliasPath)), 0o600); err != nil {
			b.Fatal(err)
		}
	}

	measure := func(k, per int) (fixedReading, time.Duration) {
		start := time.Now()
		p := startScaleProc(b, bin, fmt.Sprintf("fixed-%d-%d", per, k), harness.FreePort(b), "--config", configs[per])
		defer p.stop(syscall.SIGTERM)
		for {
			if s, all := p.synced(); all == clusters[per] && len(s) == all {
				break
			}
			if time.Since(start) > 20*time.Minute {
				log, _ := os.ReadFile(p.log)
				b.Fatalf("%d clusters: not all synced in 20 minutes; log:\n%s", clusters[per], tail(string(log), 3000))
			}
			time.Sleep(100 * time.Millisecond)
		}
		synced := time.Since(start)
		time.Sleep(5 * time.Second) // the sync's garbage collected, watches settled
		var r fixedReading
		cpu0, t0 := procCPU(p.cmd.Process.Pid), time.Now()
		time.Sleep(10 * time.Second)
		r.idleCPU = float64((procCPU(p.cmd.Process.Pid) - cpu0).Milliseconds()) / time.Since(t0).Seconds()
		r.heap, _, _ = p.memory(b)
		body, _, err := p.get("/metrics")
		if err != nil {
			b.Fatal(err)
		}
		r.goroutines = metricValue(string(body), "go_goroutines")
		r.fds = metricValue(string(body), "process_open_fds")
		r.sockets = float64(countSockets(b, p.cmd.Process.Pid))
		if dir := os.Getenv("MULTICACHE_BENCH_FIXED_GOROUTINES"); dir != "" {
			// Where the goroutines are: the daemon's goroutine profile, grouped by stack.
			prof, _, err := p.get("/debug/pprof/goroutine?debug=1")
			if err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("goroutines-%d-clusters.txt", clusters[per])), prof, 0o600); err != nil {
				b.Fatal(err)
			}
		}
		return r, synced
	}

	readings := map[int][]fixedReading{}
	syncs := map[int][]time.Duration{}
	for k := range rounds {
		order := []int{narrow, wide}
		if k%2 == 1 {
			order = []int{wide, narrow}
		}
		for _, per := range order {
			r, took := measure(k, per)
			b.Logf("round %d, %d clusters: heap %.1f MiB, %v goroutines, %v fds, %v sockets, idle CPU %.1f ms/s; synced in %s",
				k, clusters[per], r.heap/(1<<20), r.goroutines, r.fds, r.sockets, r.idleCPU, took.Round(time.Millisecond))
			readings[per] = append(readings[per], r)
			syncs[per] = append(syncs[per], took)
		}
	}

	// Per cluster × resource: the slope between the two widths, per round.
	units := float64((clusters[wide] - clusters[narrow]) * resources)
	slope := func(f func(fixedReading) float64) []float64 {
		out := make([]float64, rounds)
		for k := range rounds {
			out[k] = (f(readings[wide][k]) - f(readings[narrow][k])) / units
		}
		return out
	}
	heapKiB := slope(func(r fixedReading) float64 { return r.heap / 1024 })
	goroutines := slope(func(r fixedReading) float64 { return r.goroutines })
	fds := slope(func(r fixedReading) float64 { return r.fds })
	sockets := slope(func(r fixedReading) float64 { return r.sockets })
	idle := slope(func(r fixedReading) float64 { return r.idleCPU * 1000 }) // µs per second
	row := func(name string, xs []float64, unit string) string {
		med, lo, hi := spreadOf(xs)
		return fmt.Sprintf("| %s | %.2f%s (%.2f–%.2f) |\n", name, med, unit, lo, hi)
	}
	var table strings.Builder
	table.WriteString("| per cluster × resource | median (min–max) |\n|---|---|\n")
	table.WriteString(row("heap", heapKiB, " KiB"))
	table.WriteString(row("goroutines", goroutines, ""))
	table.WriteString(row("file descriptors", fds, ""))
	table.WriteString(row("sockets", sockets, ""))
	table.WriteString(row("CPU while idle", idle, " µs/s"))
	var widths strings.Builder
	widths.WriteString("| clusters | heap (MiB) | goroutines | fds | sockets | CPU while idle (ms/s) | start → every cluster synced |\n|---|---|---|---|---|---|---|\n")
	for _, per := range []int{narrow, wide} {
		col := func(f func(fixedReading) float64) string {
			xs := make([]float64, 0, rounds)
			for _, r := range readings[per] {
				xs = append(xs, f(r))
			}
			med, lo, hi := spreadOf(xs)
			return fmt.Sprintf("%.1f (%.1f–%.1f)", med, lo, hi)
		}
		secs := make([]float64, 0, rounds)
		for _, d := range syncs[per] {
			secs = append(secs, d.Seconds())
		}
		med, lo, hi := spreadOf(secs)
		fmt.Fprintf(&widths, "| %d | %s | %s | %s | %s | %s | %.1f s (%.1f–%.1f) |\n", clusters[per],
			col(func(r fixedReading) float64 { return r.heap / (1 << 20) }), col(func(r fixedReading) float64 { return r.goroutines }),
			col(func(r fixedReading) float64 { return r.fds }), col(func(r fixedReading) float64 { return r.sockets }),
			col(func(r fixedReading) float64 { return r.idleCPU }), med, lo, hi)
	}
	b.Log("\n" + table.String() + "\n" + widths.String())
	if os.Getenv("MULTICACHE_BENCH_WRITE") == "" {
		return
	}
	writeSection(b, "S2.2: the fixed cost of an empty cluster × resource", fmt.Sprintf(`%s
%d kube-apiservers with only their default objects, each seen through %d and then %d kubeconfig
contexts (%d and %d clusters), each cached for Pods and ConfigMaps by one daemon. Every round
starts a daemon at each width (in rotating order), waits until every cluster is synced and 5 s
more, measures the CPU it uses over the next 10 s while nothing changes, and reads its live heap
after a forced GC, go_goroutines, process_open_fds and the sockets among its file descriptors. The cost per cluster × resource is the difference between the two
widths divided by the %d cluster × resource pairs between them; %d rounds, median (min–max).

%s
%s
Contexts of one API server share its address and credentials, so client-go's transport cache
may give them one connection where distinct clusters would each have their own: the sockets
figure is a floor for distinct clusters.

Command: `+"`MULTICACHE_BENCH_WRITE=1 go test -run '^$' -bench FixedCost -benchtime 1x -timeout 3h -v ./test/bench/`"+`
`, machineLine(), servers, narrow, wide, clusters[narrow], clusters[wide], int(units), rounds, table.String(), widths.String()))
	hMed, _, _ := spreadOf(heapKiB)
	gMed, _, _ := spreadOf(goroutines)
	recordGoals(b, goal{"S2.2", "fixed cost per empty cluster × resource (heap; goroutines)", "≤ 32 KiB; ≤ 4",
		fmt.Sprintf("%.1f KiB; %.2f (slope %d → %d clusters, %d rounds)", hMed, gMed, clusters[narrow], clusters[wide], rounds),
		met(hMed <= 32 && gMed <= 4), ""})
}

// spreadOf is the median, min and max of xs.
func spreadOf(xs []float64) (med, lo, hi float64) {
	return median(xs), slices.Min(xs), slices.Max(xs)
}

// metricValue is the value of an unlabelled metric in a Prometheus text exposition.
func metricValue(body, name string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			x, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return x
		}
	}
	return 0
}

// countSockets counts the sockets among a process's open file descriptors.
func countSockets(b *testing.B, pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n
}
