package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/multicache/multicache/test/harness"
)

// s2Round is what one round of S2 measured: S1's shape (100 clusters × 20,000 objects) on
// one replica, for reference, and S2's (1,000 clusters × 2,000) on one replica and three.
type s2Round struct {
	ref  singleRun
	one  singleRun
	many shardedRun
}

// BenchmarkFleetScale1000 (S2): the same 2M objects as S1, over ten times the clusters.
// Five API servers hold 2,000 objects each and are seen through 200 contexts each (1,000
// clusters); five more hold 20,000 each through 20 contexts (S1's 100 clusters). Each round
// runs one replica over S1's fleet, then one over S2's, then three sharding S2's (with a
// rolling restart of the three before one is killed), so that every ratio to S1 is measured
// side by side in the same round.
func BenchmarkFleetScale1000(b *testing.B) {
	rounds := harness.EnvInt("MULTICACHE_BENCH_SCALE_RUNS", 5)
	servers := harness.EnvInt("MULTICACHE_BENCH_SCALE_SERVERS", 5)
	wide := newScaleFleet(b, servers, harness.EnvInt("MULTICACHE_BENCH_SCALE1000_ALIASES", 200), harness.EnvInt("MULTICACHE_BENCH_SCALE1000_OBJECTS", 2000), true)
	wide.rolling = true
	if os.Getenv("MULTICACHE_BENCH_SCALE1000_SHARDED_ONLY") != "" {
		// The three replicas alone (moves, the rolling restart, the kill): no reference and
		// no single replica, so only S2.6 and S2.7 are recorded.
		var rr []shardedRun
		wide.profileDir = os.Getenv("MULTICACHE_BENCH_PROFILE_DIR")
		ab := strings.Fields(os.Getenv("MULTICACHE_BENCH_SCALE1000_AB_ARGS"))
		if other := os.Getenv("MULTICACHE_BENCH_AB_BINARY"); other != "" || len(ab) > 0 {
			killAB(b, wide, rounds, abArm(b, other, ab))
			return
		}
		for k := 1; k <= rounds; k++ {
			rr = append(rr, wide.sharded(k, wide.names[len(wide.names)/2]))
		}
		writeShardedOnly(b, wide, rr)
		return
	}
	ref := newScaleFleet(b, servers, harness.EnvInt("MULTICACHE_BENCH_SCALE_ALIASES", 20), harness.EnvInt("MULTICACHE_BENCH_SCALE_OBJECTS", 20000), false)
	if dir := os.Getenv("MULTICACHE_BENCH_PROFILE_DIR"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		wide.profileDir, ref.profileDir = dir, dir
	}
	runStart := time.Now()
	var rr []s2Round
	for k := 1; k <= rounds; k++ {
		var r s2Round
		r.ref = ref.single(k, "s1-single")
		r.one = wide.single(k, "s2-single")
		r.many = wide.sharded(k, r.one.probe)
		b.Logf("round %d: heap %s ÷ %s = %.2f×; synced %s ÷ %s = %.2f×",
			k, gib(r.one.oneHeap), gib(r.ref.oneHeap), r.one.oneHeap/r.ref.oneHeap, r.one.oneSynced.Round(100*time.Millisecond), r.ref.oneSynced.Round(100*time.Millisecond), r.one.oneSynced.Seconds()/r.ref.oneSynced.Seconds())
		rr = append(rr, r)
	}
	roundTook := time.Since(runStart) / time.Duration(rounds)

	col := func(get func(s2Round) float64) []float64 { return column(rr, get) }
	ms := func(get func(s2Round) time.Duration) string {
		return ceilingSpread(col(func(r s2Round) float64 { return float64(get(r)) / float64(time.Millisecond) }), "%.0f ms")
	}
	secs := func(get func(s2Round) time.Duration) string {
		return ceilingSpread(col(func(r s2Round) float64 { return get(r).Seconds() }), "%.1f s")
	}
	gibs := func(get func(s2Round) float64) string {
		return ceilingSpread(col(func(r s2Round) float64 { return get(r) / (1 << 30) }), "%.2f GiB")
	}
	lease := scaleLease
	fleetList := 2 * wide.clusters // one full list of each cached resource in every cluster
	heapVsS1 := col(func(r s2Round) float64 { return r.one.oneHeap / r.ref.oneHeap })
	syncVsS1 := col(func(r s2Round) float64 { return r.one.oneSynced.Seconds() / r.ref.oneSynced.Seconds() })
	heapRatio := col(func(r s2Round) float64 { return r.many.maxHeap / r.one.oneHeap })
	rssRatio := col(func(r s2Round) float64 { return r.many.maxRSSRatio })
	pageRatio := col(func(r s2Round) float64 { return float64(r.many.fanPage99) / float64(r.one.onePage99) })
	fanPage99 := col(func(r s2Round) float64 { return float64(r.many.fanPage99) / float64(time.Millisecond) })
	nodeRatio := col(func(r s2Round) float64 { return float64(r.many.fanNode99) / float64(r.one.oneNode99) })
	watchRatio := col(func(r s2Round) float64 { return float64(r.many.fanWatch99) / float64(r.one.oneWatch99) })
	served := col(func(r s2Round) float64 { return r.many.killServed.Seconds() })
	budget := col(func(r s2Round) float64 { return (2*lease + r.many.slowestRelist).Seconds() })
	rollRatio := col(func(r s2Round) float64 { return float64(r.many.rollLists) / float64(fleetList) })
	note := fmt.Sprintf("median (min–max) of %d rounds", rounds)
	recordGoals(b,
		goal{ID: "S2.1", Figure: "heap, one replica, 1,000 clusters × 2,000 ÷ S1's 100 × 20,000 (same 2M objects)", Goal: "≤ 1.15×",
			Measured: ceilingSpread(heapVsS1, "%.2f×") + " (side by side); " + note, Met: met(median(heapVsS1) <= 1.15)},
		goal{ID: "S2.3", Figure: "start → every cluster synced, one replica ÷ S1's", Goal: "≤ 1.5×",
			Measured: ceilingSpread(syncVsS1, "%.2f×") + " (side by side); " + note, Met: met(median(syncVsS1) <= 1.5)},
		goal{ID: "S2.4", Figure: "three replicas: heap of the largest ÷ one replica's", Goal: "≤ 0.4×",
			Measured: ceilingSpread(heapRatio, "%.2f×") + "; " + note, Met: met(median(heapRatio) <= 0.4)},
		goal{ID: "S2.4", Figure: "three replicas: RSS ÷ heap, largest", Goal: "≤ 1.5",
			Measured: ceilingSpread(rssRatio, "%.2f") + "; " + note, Met: met(median(rssRatio) <= 1.5)},
		goal{ID: "S2.5", Figure: "fleet list page of 500 through a non-owner, p99", Goal: "≤ 3× one replica's, and ≤ 100 ms",
			Measured: fmt.Sprintf("%s, %s; %s", ceilingSpread(pageRatio, "%.2f×"), ceilingSpread(fanPage99, "%.0f ms"), note), Met: met(median(pageRatio) <= 3 && median(fanPage99) <= 100)},
		goal{ID: "S2.6", Figure: "kill one of three: every cluster served again", Goal: "≤ 2 lease durations + the slowest relist",
			Measured: fmt.Sprintf("%s against %s; %s", ceilingSpread(served, "%.1f s"), ceilingSpread(budget, "%.1f s"), note), Met: met(median(served) <= median(budget))},
		goal{ID: "S2.7", Figure: "rolling restart of three: member LISTs ÷ one fleet list", Goal: "0 (handovers)",
			Measured: fmt.Sprintf("%s (%s full lists of %d); %s", ceilingSpread(rollRatio, "%.3f×"), ceilingSpread(col(func(r s2Round) float64 { return float64(r.many.rollLists) }), "%.0f"), fleetList, note), Met: met(slices.Max(rollRatio) == 0)}, // every round: a handover that fell back is a miss
	)
	var rows []string
	for i, r := range rr {
		rows = append(rows, fmt.Sprintf("| %d | %s / %s | %s / %s | %s | %.2f× | %.2f | %s / %s | %s / %s | %d (%s) | %s, %s, %s (%d clusters, slowest relist %s) | %s |",
			i+1, gib(r.ref.oneHeap), gib(r.one.oneHeap), r.ref.oneSynced.Round(100*time.Millisecond), r.one.oneSynced.Round(100*time.Millisecond),
			gib(r.many.maxHeap), r.many.maxHeap/r.one.oneHeap, r.many.maxRSSRatio,
			r.one.onePage99.Round(time.Millisecond), r.many.fanPage99.Round(time.Millisecond),
			r.one.oneWatch99.Round(time.Millisecond), r.many.fanWatch99.Round(time.Millisecond),
			r.many.rollLists, r.many.rollTook.Round(time.Second),
			r.many.killOwned.Round(100*time.Millisecond), r.many.killServed.Round(100*time.Millisecond), (2*lease+r.many.slowestRelist).Round(100*time.Millisecond), r.many.moved, r.many.slowestRelist.Round(100*time.Millisecond),
			r.many.owners))
	}
	var rolls []string
	for i, r := range rr {
		rolls = append(rolls, fmt.Sprintf("- round %d: %s", i+1, r.many.rollDetail))
	}
	var kills []string
	for i, r := range rr {
		kills = append(kills, fmt.Sprintf("- round %d: %s", i+1, r.many.killCPU))
	}
	last := rr[len(rr)-1]
	writeSection(b, "S2: a thousand clusters, one replica and three", fmt.Sprintf(`%s

%d clusters × %d objects (%d in all, half Pods, half ConfigMaps): %d kube-apiservers bulk-seeded
with %d objects each, each seen through %d kubeconfig contexts (fleet.WriteAliases), every
context a cluster of its own to the daemon. Beside them, S1's shape for reference: %d more
API servers with %d objects each, through %d contexts each (%d clusters, %d objects). As in
S1, the API servers are shared: this measures the daemon, and the ten API servers' CPU
competes with the daemons' on the same cores.

Both fleets are seeded once (%s and %s); then %d rounds, each about %s: one replica over S1's
fleet (the reference), then one over S2's, each measured and stopped as in S1; then three
replicas shard S2's fleet over Leases (lease %s) and are measured as in S1; then they are
restarted one at a time as a rolling update does it (a new replica under a new name and
address starts beside the old one; once the four hold their owners still for a lease
duration, the old one stops with SIGTERM and the three hold still again), and one of the three
is killed with SIGKILL. The full lists the replicas asked of the API servers during the
rolling restart are counted from the API servers' audit logs (LIST without continue, and
watch-lists, of Pods and ConfigMaps): one fleet list is %d.

| figure | S1's shape, one replica | S2, one replica | S2, three replicas | ratio | goal |
|---|---|---|---|---|---|
| heap (of the three, the largest) | %s | %s | %s | S2.1: %s (S2 ÷ S1); S2.4: %s (three ÷ one) | ≤ 1.15×; ≤ 0.4× |
| RSS ÷ heap (of the three, the largest ratio) | %s | %s | %s | | ≤ 1.5 |
| peak RSS (VmHWM; of the three, the largest) | %s | %s | %s | | |
| start → every cluster synced | %s (ready %s) | %s (ready %s) | %s (shared and stable after %s) | S2.3: %s (S2 ÷ S1) | ≤ 1.5× |
| fleet list page of 500, p50 | %s | %s | %s | | |
| fleet list page of 500, p99 | %s | %s | %s | S2.5: %s | ≤ 3× and ≤ 100 ms |
| index query (spec.nodeName, ≤ 500), p50 / p99 | %s / %s | %s / %s | %s / %s | %s p99 | |
| write → watch, p50 | %s | %s | %s (through a non-owner) | | |
| write → watch, p99 | %s | %s | %s (through a non-owner) | %s | |
| rolling restart of the three: full lists served | | | %s of %d | S2.7: %s | 0 |
| rolling restart of the three: time | | | %s | | |
| one replica killed: its clusters owned by survivors | | | %s | | |
| one replica killed: every cluster served again | | | %s | S2.6 | ≤ 2 lease durations + the slowest relist: %s |

Each round:

| round | heap, S1 one / S2 one | synced, S1 one / S2 one | heap, largest of three | ratio | RSS ÷ heap, largest | page p99, one / through a non-owner | write → watch p99, one / through a non-owner | rolling restart: full lists (time) | kill: owned, served, budget | owners |
|---|---|---|---|---|---|---|---|---|---|---|
%s

What the API servers served during each rolling restart:
%s

Where the CPU went after each kill (CPU seconds of the two survivors, and of the API servers
with etcd; the machine's busy share counts every process):
%s

Last round, per replica: %s.

Command: `+"`make bench-scale-1000`"+` (`+"`MULTICACHE_BENCH_SCALE_RUNS=%d go test -run '^$' -bench 'FleetScale1000$' -benchtime 1x -timeout 5h -v ./test/bench/`"+`)
`, machineLine(), wide.clusters, wide.perServer, wide.objects, wide.servers, wide.perServer, wide.aliases,
		ref.servers, ref.perServer, ref.aliases, ref.clusters, ref.objects,
		ref.seedTook.Round(time.Second), wide.seedTook.Round(time.Second), rounds, roundTook.Round(time.Second), lease, fleetList,
		gibs(func(r s2Round) float64 { return r.ref.oneHeap }), gibs(func(r s2Round) float64 { return r.one.oneHeap }), gibs(func(r s2Round) float64 { return r.many.maxHeap }), ceilingSpread(heapVsS1, "%.2f×"), ceilingSpread(heapRatio, "%.2f×"),
		ceilingSpread(col(func(r s2Round) float64 { return r.ref.oneRSS / r.ref.oneHeap }), "%.2f"), ceilingSpread(col(func(r s2Round) float64 { return r.one.oneRSS / r.one.oneHeap }), "%.2f"), ceilingSpread(rssRatio, "%.2f"),
		gibs(func(r s2Round) float64 { return r.ref.onePeak }), gibs(func(r s2Round) float64 { return r.one.onePeak }), gibs(func(r s2Round) float64 { return r.many.maxPeak }),
		secs(func(r s2Round) time.Duration { return r.ref.oneSynced }), secs(func(r s2Round) time.Duration { return r.ref.oneReady }),
		secs(func(r s2Round) time.Duration { return r.one.oneSynced }), secs(func(r s2Round) time.Duration { return r.one.oneReady }),
		secs(func(r s2Round) time.Duration { return r.many.threeSynced }), secs(func(r s2Round) time.Duration { return r.many.balanced }), ceilingSpread(syncVsS1, "%.2f×"),
		ms(func(r s2Round) time.Duration { return r.ref.onePage50 }), ms(func(r s2Round) time.Duration { return r.one.onePage50 }), ms(func(r s2Round) time.Duration { return r.many.fanPage50 }),
		ms(func(r s2Round) time.Duration { return r.ref.onePage99 }), ms(func(r s2Round) time.Duration { return r.one.onePage99 }), ms(func(r s2Round) time.Duration { return r.many.fanPage99 }), ceilingSpread(pageRatio, "%.2f×"),
		ms(func(r s2Round) time.Duration { return r.ref.oneNode50 }), ms(func(r s2Round) time.Duration { return r.ref.oneNode99 }),
		ms(func(r s2Round) time.Duration { return r.one.oneNode50 }), ms(func(r s2Round) time.Duration { return r.one.oneNode99 }),
		ms(func(r s2Round) time.Duration { return r.many.fanNode50 }), ms(func(r s2Round) time.Duration { return r.many.fanNode99 }), ceilingSpread(nodeRatio, "%.2f×"),
		ms(func(r s2Round) time.Duration { return r.ref.oneWatch50 }), ms(func(r s2Round) time.Duration { return r.one.oneWatch50 }), ms(func(r s2Round) time.Duration { return r.many.fanWatch50 }),
		ms(func(r s2Round) time.Duration { return r.ref.oneWatch99 }), ms(func(r s2Round) time.Duration { return r.one.oneWatch99 }), ms(func(r s2Round) time.Duration { return r.many.fanWatch99 }), ceilingSpread(watchRatio, "%.2f×"),
		ceilingSpread(col(func(r s2Round) float64 { return float64(r.many.rollLists) }), "%.0f"), fleetList, ceilingSpread(rollRatio, "%.3f×"),
		secs(func(r s2Round) time.Duration { return r.many.rollTook }),
		secs(func(r s2Round) time.Duration { return r.many.killOwned }), secs(func(r s2Round) time.Duration { return r.many.killServed }), ceilingSpread(budget, "%.1f s"),
		strings.Join(rows, "\n"), strings.Join(rolls, "\n"), strings.Join(kills, "\n"), last.many.perReplica, rounds))
	if dir := wide.profileDir; dir != "" {
		b.Logf("CPU profiles of the first round's syncs: %s", filepath.Join(dir, "*-sync.pprof"))
	}
}

// writeShardedOnly records S2.6 and S2.7 from rounds of the three replicas alone
// (MULTICACHE_BENCH_SCALE1000_SHARDED_ONLY), in a section of their own.
func writeShardedOnly(b *testing.B, wide *scaleFleet, rr []shardedRun) {
	col := func(get func(shardedRun) float64) []float64 { return column(rr, get) }
	lease := scaleLease
	fleetList := 2 * wide.clusters
	served := col(func(r shardedRun) float64 { return r.killServed.Seconds() })
	budget := col(func(r shardedRun) float64 { return (2*lease + r.slowestRelist).Seconds() })
	rollRatio := col(func(r shardedRun) float64 { return float64(r.rollLists) / float64(fleetList) })
	note := fmt.Sprintf("median (min–max) of %d rounds of the three replicas alone (BENCHMARKS.md, \"S2: the three replicas alone\")", len(rr))
	recordGoals(b,
		goal{ID: "S2.6", Figure: "kill one of three: every cluster served again", Goal: "≤ 2 lease durations + the slowest relist",
			Measured: fmt.Sprintf("%s against %s; %s", ceilingSpread(served, "%.1f s"), ceilingSpread(budget, "%.1f s"), note), Met: met(median(served) <= median(budget))},
		goal{ID: "S2.7", Figure: "rolling restart of three: member LISTs ÷ one fleet list", Goal: "0 (handovers)",
			Measured: fmt.Sprintf("%s (%s full lists of %d); %s", ceilingSpread(rollRatio, "%.3f×"), ceilingSpread(col(func(r shardedRun) float64 { return float64(r.rollLists) }), "%.0f"), fleetList, note), Met: met(slices.Max(rollRatio) == 0)}, // every round: a handover that fell back is a miss
	)
	var rows, detail []string
	for i, r := range rr {
		rows = append(rows, fmt.Sprintf("| %d | %s | %d (%s) | %s, %s, %s (%d clusters, slowest relist %s) | %s |",
			i+1, r.threeSynced.Round(100*time.Millisecond), r.rollLists, r.rollTook.Round(time.Second),
			r.killOwned.Round(100*time.Millisecond), r.killServed.Round(100*time.Millisecond), (2*lease+r.slowestRelist).Round(100*time.Millisecond), r.moved, r.slowestRelist.Round(100*time.Millisecond), r.owners))
		detail = append(detail, fmt.Sprintf("- round %d: rolling restart: %s; kill: %s", i+1, r.rollDetail, r.killCPU))
	}
	writeSection(b, "S2: the three replicas alone", fmt.Sprintf(`%s

S2's fleet (%d clusters × %d objects: %d kube-apiservers, each seen through %d contexts) and
its three replicas (lease %s), as in the S2 section, without the single replicas: each round
starts the three, restarts them one at a time as a rolling update does, and kills one with
SIGKILL. Full lists are counted from the API servers' audit logs (one fleet list is %d).

| figure | median (min–max) | goal |
|---|---|---|
| rolling restart: full lists served ÷ one fleet list | %s (%s lists) | S2.7: 0 |
| rolling restart: time | %s | |
| one replica killed: its clusters owned by survivors | %s | |
| one replica killed: every cluster served again | %s against %s | S2.6: ≤ 2 lease durations + the slowest relist |

| round | three synced | rolling restart: full lists (time) | kill: owned, served, budget | owners |
|---|---|---|---|---|
%s

What the API servers served, and where the CPU went after each kill (CPU seconds of the two
survivors, and of the API servers with etcd; the machine's busy share counts every process):
%s

Command: `+"`MULTICACHE_BENCH_SCALE1000_SHARDED_ONLY=1 MULTICACHE_BENCH_SCALE_RUNS=%d go test -run '^$' -bench 'FleetScale1000$' -benchtime 1x -timeout 5h -v ./test/bench/`"+`
`, machineLine(), wide.clusters, wide.perServer, wide.servers, wide.aliases, lease, fleetList,
		ceilingSpread(rollRatio, "%.3f×"), ceilingSpread(col(func(r shardedRun) float64 { return float64(r.rollLists) }), "%.0f"),
		ceilingSpread(col(func(r shardedRun) float64 { return r.rollTook.Seconds() }), "%.1f s"),
		ceilingSpread(col(func(r shardedRun) float64 { return r.killOwned.Seconds() }), "%.1f s"),
		ceilingSpread(served, "%.1f s"), ceilingSpread(budget, "%.1f s"),
		strings.Join(rows, "\n"), strings.Join(detail, "\n"), len(rr)))
}

// abSide is the other arm of an A/B of the three replicas alone: flags added to every
// replica, another daemon binary in place of this tree's, or both.
type abSide struct {
	bin   string   // another daemon binary; "" runs this tree's
	args  []string // flags added to every replica
	label string   // the binary's commit (MULTICACHE_BENCH_AB_LABEL)
}

// abArm checks and names the other arm: other, a daemon binary ("" for this tree's), and args.
func abArm(b *testing.B, other string, args []string) abSide {
	b.Helper()
	a := abSide{bin: other, args: args}
	if other != "" {
		if st, err := os.Stat(other); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			b.Fatalf("MULTICACHE_BENCH_AB_BINARY=%q: not an executable file (%v)", other, err)
		}
		if a.label = os.Getenv("MULTICACHE_BENCH_AB_LABEL"); a.label == "" {
			a.label = other
		}
	}
	return a
}

// name is how the tables name the arm.
func (a abSide) name() string {
	var parts []string
	if a.bin != "" {
		parts = append(parts, "the daemon at "+a.label)
	}
	if len(a.args) > 0 {
		parts = append(parts, "`"+strings.Join(a.args, " ")+"`")
	}
	return strings.Join(parts, " with ")
}

// env is the environment of the command that runs the A/B again.
func (a abSide) env() string {
	var parts []string
	if a.bin != "" {
		parts = append(parts, fmt.Sprintf("MULTICACHE_BENCH_AB_BINARY=<a daemon built at %s> MULTICACHE_BENCH_AB_LABEL=%s", a.label, a.label))
	}
	if len(a.args) > 0 {
		parts = append(parts, fmt.Sprintf("MULTICACHE_BENCH_SCALE1000_AB_ARGS='%s'", strings.Join(a.args, " ")))
	}
	return strings.Join(parts, " ")
}

// killAB measures the three replicas alone side by side, without the rolling restart: this
// tree's daemon with the default flags against alt (another binary, flags added, or both),
// alternating which goes first, so that both arms see the machine in the same state. It
// records S2.6 from the default arm and writes both arms in a section of their own, named by
// alt: a flag's section is "S2.6 side by side: FLAGS", a binary's "S2, three replicas side by
// side: COMMIT and THIS".
func killAB(b *testing.B, wide *scaleFleet, rounds int, alt abSide) {
	wide.rolling = false
	this := wide.bin
	defName := "default"
	title := "S2.6 side by side: " + strings.Join(alt.args, " ")
	if alt.bin != "" {
		here := thisTree()
		defName = "this tree (" + here + ")"
		title = fmt.Sprintf("S2, three replicas side by side: %s and %s", alt.label, here)
		if len(alt.args) > 0 {
			title += " (" + strings.Join(alt.args, " ") + ")"
		}
	}
	altName := alt.name()
	var def, other []shardedRun
	// Each round runs both arms, the default first in odd rounds and second in even ones, so
	// neither arm always runs on a machine the other has just warmed or loaded.
	k := 0
	for i := range rounds {
		order := []bool{false, true}
		if i%2 == 1 {
			order = []bool{true, false}
		}
		for _, isAlt := range order {
			k++
			wide.bin, wide.extraArgs = this, nil
			if isAlt {
				wide.extraArgs = alt.args
				if alt.bin != "" {
					wide.bin = alt.bin
				}
			}
			r := wide.sharded(k, wide.names[len(wide.names)/2])
			if isAlt {
				other = append(other, r)
			} else {
				def = append(def, r)
			}
		}
	}
	wide.bin, wide.extraArgs = this, nil
	lease := scaleLease
	served := func(rr []shardedRun) []float64 {
		return column(rr, func(r shardedRun) float64 { return r.killServed.Seconds() })
	}
	budget := func(rr []shardedRun) []float64 {
		return column(rr, func(r shardedRun) float64 { return (2*lease + r.slowestRelist).Seconds() })
	}
	ms := func(get func(shardedRun) time.Duration) func(shardedRun) float64 {
		return func(r shardedRun) float64 { return float64(get(r)) / float64(time.Millisecond) }
	}
	type figure struct {
		name, format string
		get          func(shardedRun) float64
	}
	figures := []figure{
		{"one replica killed: its clusters owned by survivors", "%.1f s", func(r shardedRun) float64 { return r.killOwned.Seconds() }},
		{"one replica killed: every cluster served again", "%.1f s", func(r shardedRun) float64 { return r.killServed.Seconds() }},
		{"S2.6's budget: 2 lease durations + the slowest relist", "%.1f s", func(r shardedRun) float64 { return (2*lease + r.slowestRelist).Seconds() }},
		{"peak RSS of a survivor (VmHWM, over its life)", "%.2f GiB", func(r shardedRun) float64 { return r.killPeak / (1 << 30) }},
		{"three replicas' start → every cluster synced", "%.1f s", func(r shardedRun) float64 { return r.threeSynced.Seconds() }},
		{"after the start: heap spans in use, the largest of the three", "%.2f GiB", func(r shardedRun) float64 { return r.maxSpans / (1 << 30) }},
		{"after the start: RSS ÷ live heap, the largest of the three", "%.2f", func(r shardedRun) float64 { return r.maxRSSRatio }},
		{"page of 500 through a non-owner, p50", "%.0f ms", ms(func(r shardedRun) time.Duration { return r.fanPage50 })},
		{"page of 500 through a non-owner, p99", "%.0f ms", ms(func(r shardedRun) time.Duration { return r.fanPage99 })},
		{"index query (spec.nodeName) through a non-owner, p99", "%.0f ms", ms(func(r shardedRun) time.Duration { return r.fanNode99 })},
		{"write → watch through a non-owner, p50", "%.0f ms", ms(func(r shardedRun) time.Duration { return r.fanWatch50 })},
		{"write → watch through a non-owner, p99", "%.0f ms", ms(func(r shardedRun) time.Duration { return r.fanWatch99 })},
	}
	var table []string
	for _, f := range figures {
		table = append(table, fmt.Sprintf("| %s | %s | %s |", f.name, ceilingSpread(column(def, f.get), f.format), ceilingSpread(column(other, f.get), f.format)))
	}
	ratio := median(served(def)) / median(served(other))
	note := fmt.Sprintf("median (min–max) of %d rounds of the three replicas alone, killed without a rolling restart before (BENCHMARKS.md, %q, arm: %s)", rounds, title, defName)
	recordGoals(b, goal{ID: "S2.6", Figure: "kill one of three: every cluster served again", Goal: "≤ 2 lease durations + the slowest relist",
		Measured: fmt.Sprintf("%s against %s; %s", ceilingSpread(served(def), "%.1f s"), ceilingSpread(budget(def), "%.1f s"), note), Met: met(median(served(def)) <= median(budget(def)))})
	var rows []string
	for i := range def {
		type armRun struct {
			name string
			r    shardedRun
		}
		arms := []armRun{{defName, def[i]}, {altName, other[i]}}
		if i%2 == 1 {
			arms[0], arms[1] = arms[1], arms[0] // in the order they ran
		}
		for _, arm := range arms {
			r := arm.r
			rows = append(rows, fmt.Sprintf("| %d | %s | %s, %s, %s (%d clusters, slowest relist %s) | %s / %s | %s | %s |", i+1, arm.name,
				r.killOwned.Round(100*time.Millisecond), r.killServed.Round(100*time.Millisecond), (2*lease+r.slowestRelist).Round(100*time.Millisecond), r.moved, r.slowestRelist.Round(100*time.Millisecond),
				r.fanPage99.Round(time.Millisecond), r.fanWatch99.Round(time.Millisecond), gib(r.killPeak), r.killCPU))
		}
	}
	writeSection(b, title, fmt.Sprintf(`%s

S2's fleet (%d clusters × %d objects: %d kube-apiservers, each seen through %d contexts) and
its three replicas (lease %s), as in "S2: the three replicas alone", without the rolling
restart: each round starts the three, waits until they share the fleet and hold still,
measures them as S2 does, and kills one with SIGKILL. Each of %d rounds runs %s and %s, the
first one first in odd rounds and second in even ones.

| figure | %s | %s |
|---|---|---|
%s

Every cluster served again, %s ÷ %s: %.2f× (medians).

| round | arm | kill: owned, served, budget | page p99 / write → watch p99, through a non-owner | survivors' peak RSS | CPU after the kill (survivors, API servers with etcd, the machine's busy share) |
|---|---|---|---|---|---|
%s

Command: `+"`MULTICACHE_BENCH_SCALE1000_SHARDED_ONLY=1 %s MULTICACHE_BENCH_SCALE_RUNS=%d go test -run '^$' -bench 'FleetScale1000$' -benchtime 1x -timeout 5h -v ./test/bench/`"+`
`, machineLine(), wide.clusters, wide.perServer, wide.servers, wide.aliases, lease, rounds, defName, altName,
		defName, altName, strings.Join(table, "\n"),
		defName, altName, ratio, strings.Join(rows, "\n"), alt.env(), rounds))
}
