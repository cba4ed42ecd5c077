package bench

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/test/harness"
)

// summaryHTTPConfig is S1's configuration with the image index on Pods, and counts kept of the
// tier label and of that index (namespace is kept by default).
const summaryHTTPConfig = `kubeconfig:
  paths: [%q]
resources:
  - name: pods
    indexes: [pod-node, image]
    counts: ["label:tier", "index:image"]
  - name: configmaps
`

// BenchmarkSummaryHTTP (I1 over HTTP) asks the daemon for fleet summaries over loopback HTTP,
// as a dashboard does: S1's fleet (MULTICACHE_BENCH_SCALE_SERVERS API servers, 5, bulk-seeded
// with MULTICACHE_BENCH_SCALE_OBJECTS objects each, 20,000, half Pods and half ConfigMaps, each
// seen through MULTICACHE_BENCH_SCALE_ALIASES contexts, 20: 100 clusters, 1M Pods), one daemon
// whose Pods keep counts of namespace, label:tier and index:image. From 15 s after every
// cluster synced, MULTICACHE_BENCH_SUMMARY_HTTP_ROUNDS rounds (5) of MULTICACHE_BENCH_SCALE_QUERIES asks (200)
// of each summary; each round's p50 and p99, and their median (min–max) over the rounds. Each
// answer is checked: its total is every Pod, and every cluster is in it, synced.
func BenchmarkSummaryHTTP(b *testing.B) {
	servers := harness.EnvInt("MULTICACHE_BENCH_SCALE_SERVERS", 5)
	aliases := harness.EnvInt("MULTICACHE_BENCH_SCALE_ALIASES", 20)
	per := harness.EnvInt("MULTICACHE_BENCH_SCALE_OBJECTS", 20000)
	rounds := harness.EnvInt("MULTICACHE_BENCH_SUMMARY_HTTP_ROUNDS", 5)
	for range b.N {
		sf := newScaleFleet(b, servers, aliases, per, false)
		cfg := filepath.Join(b.TempDir(), "summary.yaml")
		aliasPath := strings.TrimSuffix(sf.cfgPath, "multicache.yaml") + "aliases.kubeconfig"
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(summaryHTTPConfig, aliasPath)), 0o600); err != nil {
			b.Fatal(err)
		}
		p := startScaleProc(b, sf.bin, "summary", harness.FreePort(b), "--config", cfg)
		start := time.Now()
		synced := sf.waitAll("summary: every cluster synced", p, 30*time.Minute, nil)
		pods := sf.objects / 2
		b.Logf("%d clusters, %d Pods: every cluster synced in %s", sf.clusters, pods, synced.Round(time.Second))
		// Once synced, the daemon collects and returns its sync's garbage to the OS; the asks
		// start 15 s later, as S1's replicas are measured (scaleFleet.single).
		time.Sleep(15 * time.Second)
		keys := []string{"cluster", "namespace", "cluster,namespace", "label:tier", "index:image"}
		p50s, p99s := map[string][]time.Duration{}, map[string][]time.Duration{}
		for r := range rounds {
			for _, by := range keys {
				path := "/multicache/v1/resources/pods/summary?" + url.Values{"by": {by}}.Encode()
				body, code, err := p.get(path)
				var s api.Summary
				if err == nil && code == http.StatusOK {
					err = json.Unmarshal(body, &s)
				}
				if err != nil || code != http.StatusOK {
					b.Fatalf("summary by %s: %d %v %.300s", by, code, err, body)
				}
				fresh := 0
				for _, c := range s.Clusters {
					if c.Synced {
						fresh++
					}
				}
				if s.Total != pods || fresh != sf.clusters {
					b.Fatalf("summary by %s: total %d, %d of %d clusters synced; want %d Pods of %d synced clusters", by, s.Total, fresh, len(s.Clusters), pods, sf.clusters)
				}
				p50, p99 := p.latencies(b, sf.queries, func(int) string { return path })
				p50s[by], p99s[by] = append(p50s[by], p50), append(p99s[by], p99)
				b.Logf("round %d: by=%s: %d groups; p50 %s, p99 %s", r+1, by, len(s.Groups), p50, p99)
			}
		}
		med := func(d []time.Duration) string {
			s := slices.Clone(d)
			slices.Sort(s)
			ms := func(x time.Duration) string { return fmt.Sprintf("%.2f", float64(x.Microseconds())/1000) }
			return fmt.Sprintf("%s ms (%s–%s)", ms(s[len(s)/2]), ms(s[0]), ms(s[len(s)-1]))
		}
		rows := []string{"| summary | p50 | p99 |", "|---|---|---|"}
		for _, by := range keys {
			rows = append(rows, fmt.Sprintf("| `by=%s` | %s | %s |", by, med(p50s[by]), med(p99s[by])))
		}
		b.Logf("%s\n%d rounds of %d asks each, over %s since the daemon started\n%s", machineLine(), rounds, sf.queries, time.Since(start).Round(time.Second), strings.Join(rows, "\n"))
		p.stop(syscall.SIGTERM)
	}
}
