package fleet_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/multicache/multicache/test/fleet"
)

// BenchmarkSeed measures the loader's create rate into a fresh 3-cluster fleet and where the CPU
// went meanwhile. FLEET_BENCH_OBJECTS sets the objects per cluster (default 5000).
//
//	go test -run '^$' -bench Seed -benchtime 1x ./test/fleet/
func BenchmarkSeed(b *testing.B) {
	n := 5000
	if v, err := strconv.Atoi(os.Getenv("FLEET_BENCH_OBJECTS")); err == nil && v > 0 {
		n = v
	}
	for range b.N {
		b.StopTimer()
		f := fleet.StartT(b, fleet.Options{Clusters: 3})
		l, err := fleet.NewLoader(f)
		if err != nil {
			b.Fatal(err)
		}
		before := f.CPUSeconds()
		b.StartTimer()
		w, err := l.Seed(context.Background(), fleet.SpecForObjects(n, []string{"fleet-1", "fleet-2"}))
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		after := f.CPUSeconds()
		b.ReportMetric(w.Rate(), "creates/s")
		b.ReportMetric(float64(w.Creates), "creates")
		b.Logf("%d creates in %s = %.0f/s; CPU seconds by process: %s", w.Creates, w.Elapsed.Round(time.Millisecond), w.Rate(), fleet.CPUSplit(before, after, w.Elapsed))
		if err := f.Stop(); err != nil {
			b.Fatal(err)
		}
	}
}
