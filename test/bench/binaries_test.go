package bench

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/multicache/multicache/test/harness"
)

// BenchmarkDaemonBinaries runs S1's one-replica measurement for two daemon binaries side by
// side, over one seeded fleet: this tree's daemon and the one MULTICACHE_BENCH_AB_BINARY names
// (another commit's build, labelled MULTICACHE_BENCH_AB_LABEL). Each round runs both, the
// other binary first in odd rounds and second in even ones, so that neither always meets a
// machine the other has just loaded. It tells whether the commits between the two moved the
// one-replica figures (sync, heap, a page's and an index query's latency, write → watch) on
// the machine as it is, where comparing with a run of another day cannot. S1's shape and
// rounds by default (MULTICACHE_BENCH_SCALE_SERVERS, _ALIASES, _OBJECTS, _RUNS, as for
// BenchmarkFleetScale). It skips without MULTICACHE_BENCH_AB_BINARY. `make bench-binaries
// AB_REF=<commit>` builds that commit's daemon and runs it; by hand:
//
//	MULTICACHE_BENCH_AB_BINARY=/tmp/multicache-618c865 MULTICACHE_BENCH_AB_LABEL=618c865 \
//	  go test -run '^$' -bench DaemonBinaries -benchtime 1x -timeout 3h -v ./test/bench/
func BenchmarkDaemonBinaries(b *testing.B) {
	other := os.Getenv("MULTICACHE_BENCH_AB_BINARY")
	if other == "" {
		b.Skip("MULTICACHE_BENCH_AB_BINARY is not set: name another daemon binary to compare this tree's with")
	}
	if st, err := os.Stat(other); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		b.Fatalf("MULTICACHE_BENCH_AB_BINARY=%q: not an executable file (%v)", other, err)
	}
	label := os.Getenv("MULTICACHE_BENCH_AB_LABEL")
	if label == "" {
		label = other
	}
	// The commit of this tree's daemon (built below), read before it is built. Each pair has a
	// section of its own, named by both commits, so that a later pair leaves this one's
	// figures in place.
	here := thisTree()
	servers := harness.EnvInt("MULTICACHE_BENCH_SCALE_SERVERS", 5)
	aliases := harness.EnvInt("MULTICACHE_BENCH_SCALE_ALIASES", 20)
	per := harness.EnvInt("MULTICACHE_BENCH_SCALE_OBJECTS", 20000)
	rounds := harness.EnvInt("MULTICACHE_BENCH_SCALE_RUNS", 5)
	sf := newScaleFleet(b, servers, aliases, per, false)
	this := sf.bin
	var mine, theirs []singleRun
	for k := 1; k <= rounds; k++ {
		order := []bool{true, false} // true: the other binary
		if k%2 == 0 {
			order = []bool{false, true}
		}
		for _, isOther := range order {
			if isOther {
				sf.bin = other
				theirs = append(theirs, sf.single(k, "other"))
			} else {
				sf.bin = this
				mine = append(mine, sf.single(k, "this"))
			}
		}
	}
	sf.bin = this

	type figure struct {
		name   string
		format string
		get    func(singleRun) float64
	}
	ms := func(get func(singleRun) time.Duration) func(singleRun) float64 {
		return func(r singleRun) float64 { return float64(get(r)) / float64(time.Millisecond) }
	}
	figures := []figure{
		{"start → every cluster synced", "%.1f s", func(r singleRun) float64 { return r.oneSynced.Seconds() }},
		{"heap (live, after a forced collection)", "%.2f GiB", func(r singleRun) float64 { return r.oneHeap / (1 << 30) }},
		{"RSS ÷ heap", "%.2f", func(r singleRun) float64 { return r.oneRSS / r.oneHeap }},
		{"fleet list page of 500, p50", "%.0f ms", ms(func(r singleRun) time.Duration { return r.onePage50 })},
		{"fleet list page of 500, p99", "%.0f ms", ms(func(r singleRun) time.Duration { return r.onePage99 })},
		{"index query (spec.nodeName, ≤ 500), p50", "%.0f ms", ms(func(r singleRun) time.Duration { return r.oneNode50 })},
		{"index query (spec.nodeName, ≤ 500), p99", "%.0f ms", ms(func(r singleRun) time.Duration { return r.oneNode99 })},
		{"write → watch, p50", "%.0f ms", ms(func(r singleRun) time.Duration { return r.oneWatch50 })},
		{"write → watch, p99", "%.0f ms", ms(func(r singleRun) time.Duration { return r.oneWatch99 })},
	}
	var rows []string
	for _, f := range figures {
		a, o := column(mine, f.get), column(theirs, f.get)
		ratio := "—"
		if m := median(o); m > 0 {
			ratio = fmt.Sprintf("%.2f×", median(a)/m)
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s |", f.name, ceilingSpread(o, f.format), ceilingSpread(a, f.format), ratio))
	}
	ms3 := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	var perRound []string
	for i := range mine {
		perRound = append(perRound, fmt.Sprintf("| %d | %s | %.1f s / %.1f s | %s / %s | %s / %s | %s / %s |", i+1,
			map[bool]string{true: "other, then this", false: "this, then other"}[(i+1)%2 == 1],
			theirs[i].oneSynced.Seconds(), mine[i].oneSynced.Seconds(),
			ms3(theirs[i].onePage50), ms3(mine[i].onePage50), ms3(theirs[i].onePage99), ms3(mine[i].onePage99),
			ms3(theirs[i].oneWatch99), ms3(mine[i].oneWatch99)))
	}
	title := fmt.Sprintf("S1, one replica side by side: %s and %s", label, here)
	writeSection(b, title, fmt.Sprintf(`%s

%d clusters × %d objects (%d API server(s), each seen through %d contexts, half Pods, half
ConfigMaps), one daemon at a time, measured as S1's one replica is. Each of %d rounds runs
both daemons: %s (MULTICACHE_BENCH_AB_BINARY) and this tree's (%s), alternating which goes first.
Median (min–max) over the rounds; the ratio is this tree's median ÷ the other's.

| figure | %s | this tree | ratio |
|---|---|---|---|
%s

| round | order | synced, %s / this | page p50 | page p99 | write → watch p99 |
|---|---|---|---|---|---|
%s

Command: `+"`MULTICACHE_BENCH_AB_BINARY=<a daemon built at %s> MULTICACHE_BENCH_AB_LABEL=%s MULTICACHE_BENCH_SCALE_SERVERS=%d MULTICACHE_BENCH_SCALE_ALIASES=%d MULTICACHE_BENCH_SCALE_OBJECTS=%d MULTICACHE_BENCH_SCALE_RUNS=%d go test -run '^$' -bench DaemonBinaries -benchtime 1x -timeout 3h -v ./test/bench/`"+`
`, machineLine(), sf.clusters, per, servers, aliases, rounds, label, here, label, strings.Join(rows, "\n"), label, strings.Join(perRound, "\n"), label, label, servers, aliases, per, rounds))
}

// thisTree names the commit this tree's daemon is built from: its short hash, "with changes"
// when tracked files differ from it, or "this tree" outside a git checkout.
func thisTree() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "this tree"
	}
	here := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		here += " with changes"
	}
	return here
}
