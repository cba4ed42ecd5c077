package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/dynamic"

	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/sources"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// countingTransport counts the requests a client sends, by method and path.
type countingTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen map[string]int
	n    atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	c.mu.Lock()
	what := r.Method + " " + r.URL.Path
	if r.URL.Query().Get("watch") == "true" {
		what += "?watch"
	}
	c.seen[what]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *countingTransport) snapshot() (int64, map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.seen {
		out[k] = v
	}
	return c.n.Load(), out
}

// BenchmarkClusterProfilesJoin measures, for 50 ClusterProfiles (aliases of two members' API
// servers, reached through the test exec plugin) turned healthy at once, the time from each
// profile's healthy status being written to its cluster being Synced (configmaps and pods),
// over MULTICACHE_BENCH_RUNS rounds (default 5); then the requests the source sends the
// management cluster in a steady minute.
//
//	go test -run '^$' -bench ClusterProfilesJoin -benchtime 1x -timeout 30m -v ./test/bench/
func BenchmarkClusterProfilesJoin(b *testing.B) {
	const profiles = 50
	runs := harness.EnvInt("MULTICACHE_BENCH_RUNS", 5)
	steady := time.Duration(harness.EnvInt("MULTICACHE_BENCH_STEADY_SECONDS", 60)) * time.Second
	env := harness.Start(b, harness.Options{Clusters: 3, Timeout: 30 * time.Minute})
	ctx, f := env.Ctx, env.Fleet
	mgmt, _ := f.Cluster("fleet-1")
	inv := harness.InstallInventory(ctx, b, mgmt.AdminConfig())
	pluginLog := b.TempDir() + "/plugin.log"
	providers := harness.WriteProviderFile(b, fleet.BuildExecPluginT(b), f.Dir, pluginLog)
	members := []*fleet.Cluster{}
	for _, n := range []string{"fleet-2", "fleet-3"} {
		c, _ := f.Cluster(n)
		members = append(members, c)
	}
	name := func(i int) string { return fmt.Sprintf("p-%02d", i) }
	access := func(i int) harness.ProfileAccess { return harness.AccessTo(b, members[i%2], "fleet-tokens") }

	// The source's own client, counted.
	cfg := mgmt.AdminConfig()
	counter := &countingTransport{seen: map[string]int{}}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter }
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	src, err := sources.NewClusterProfiles(sources.ClusterProfilesOptions{Client: dc, Namespace: harness.InventoryNamespace, ProviderFile: providers})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if err := src.Start(runCtx, time.Minute); err != nil {
		b.Fatal(err)
	}
	reg, err := clusterset.New(clusterset.Options{Source: src, Logger: zap.NewNop(), Resources: []clusterset.ResourceSpec{{Name: "configmaps"}, {Name: "pods"}}})
	if err != nil {
		b.Fatal(err)
	}
	env.Run(reg)
	changes, unsubscribe := reg.Subscribe(1 << 14)
	defer unsubscribe()

	var medians, p90s, maxes, totals []time.Duration
	for round := 1; round <= runs; round++ {
		for i := range profiles {
			inv.Set(name(i), "False", access(i))
		}
		// Profiles that appear unhealthy are in the fleet, waiting: nothing runs for them.
		harness.WaitFor(b, "every profile waiting", time.Minute, func() bool {
			n := 0
			for _, cs := range reg.Status() {
				if cs.Waiting {
					n++
				}
			}
			return n == profiles
		})
		for len(changes) > 0 {
			<-changes
		}
		written := make([]time.Time, profiles)
		start := time.Now()
		for i := range profiles {
			inv.Set(name(i), "True", access(i))
			written[i] = time.Now()
		}
		synced := map[string]map[string]bool{}
		at := map[string]time.Time{}
		deadline := time.After(5 * time.Minute)
		for len(at) < profiles {
			select {
			case ch := <-changes:
				if ch.Resource == "" || ch.To != clusterset.Synced {
					continue
				}
				if synced[ch.Cluster] == nil {
					synced[ch.Cluster] = map[string]bool{}
				}
				synced[ch.Cluster][ch.Resource] = true
				if len(synced[ch.Cluster]) == 2 {
					at[ch.Cluster] = time.Now()
				}
			case <-deadline:
				b.Fatalf("round %d: %d of %d clusters synced after 5 minutes", round, len(at), profiles)
			}
		}
		var lat []time.Duration
		last := start
		for i := range profiles {
			lat = append(lat, at[name(i)].Sub(written[i]))
			if at[name(i)].After(last) {
				last = at[name(i)]
			}
		}
		slices.Sort(lat)
		med, p90, mx := lat[len(lat)/2], lat[len(lat)*9/10], lat[len(lat)-1]
		medians, p90s, maxes, totals = append(medians, med), append(p90s, p90), append(maxes, mx), append(totals, last.Sub(start))
		b.Logf("round %d: healthy → Synced median %s, p90 %s, max %s; all 50 synced %s after the first was written (writing took %s)",
			round, med.Round(time.Millisecond), p90.Round(time.Millisecond), mx.Round(time.Millisecond), last.Sub(start).Round(time.Millisecond), written[profiles-1].Sub(start).Round(time.Millisecond))
		if round == runs {
			break // the last round's clusters stay for the steady minute
		}
		for i := range profiles {
			inv.Delete(name(i))
		}
		harness.WaitFor(b, "every profile's cluster left", 2*time.Minute, func() bool { return len(reg.Clusters()) == 0 })
	}
	b.Logf("healthy → Synced over %d rounds, median (min–max) of the rounds': median %s, p90 %s, max %s; all 50 synced in %s",
		runs, spread(medians), spread(p90s), spread(maxes), spread(totals))

	// The steady state: every cluster synced, nothing changes in the inventory.
	n0, before := counter.snapshot()
	time.Sleep(steady)
	n1, after := counter.snapshot()
	var calls []string
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			calls = append(calls, fmt.Sprintf("%s ×%d", k, d))
		}
	}
	slices.Sort(calls)
	perMinute := float64(n1-n0) / steady.Minutes()
	b.ReportMetric(perMinute, "mgmt-requests/min")
	b.Logf("steady state: %d requests to the management cluster in %s (%.1f a minute): %s; since the start: %s",
		n1-n0, steady, perMinute, strings.Join(calls, ", "), fmtCalls(after))
	if log, err := os.ReadFile(pluginLog); err == nil {
		b.Logf("exec plugin calls over the whole run (%d rounds of %d clusters × 2 resources): %d", runs, profiles, strings.Count(string(log), "\n"))
	}
}

// spread is "median (min–max)" of ds.
func spread(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("%s (%s–%s)", s[len(s)/2].Round(time.Millisecond), s[0].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

func fmtCalls(m map[string]int) string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s ×%d", k, v))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}
