package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// goal is one row of the summary: a figure of the table, its goal, what the latest run
// measured and whether that meets the goal.
type goal struct {
	ID       string `json:"id"`
	Figure   string `json:"figure"`
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	Met      string `json:"met"` // "yes", "no" or "—" (no goal)
	When     string `json:"when"`
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

const summaryPath = "../../docs/bench-summary.json"

// recordGoals merges rows into docs/bench-summary.json (a row replaces the one with the same
// ID and figure) and rewrites the Summary section of docs/BENCHMARKS.md from it, so that every
// benchmark run updates its own rows and leaves the others.
func recordGoals(b *testing.B, rows ...goal) {
	var all []goal
	if data, err := os.ReadFile(summaryPath); err == nil {
		if err := json.Unmarshal(data, &all); err != nil {
			b.Fatalf("%s: %v", summaryPath, err)
		}
	}
	for _, r := range rows {
		r.When = machineLine()[len("Measured on ") : len("Measured on ")+len("2006-01-02 15:04 MST")]
		replaced := false
		for i := range all {
			if all[i].ID == r.ID && all[i].Figure == r.Figure {
				all[i], replaced = r, true
			}
		}
		if !replaced {
			all = append(all, r)
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].ID < all[j].ID })
	data, _ := json.MarshalIndent(all, "", "  ")
	if err := os.WriteFile(summaryPath, append(data, '\n'), 0o644); err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	sb.WriteString("Each row comes from the section below that names it; `make bench` rewrites both.\n\n")
	sb.WriteString("| id | figure | goal | measured | met | run |\n|---|---|---|---|---|---|\n")
	for _, r := range all {
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s |\n", r.ID, r.Figure, r.Goal, r.Measured, r.Met, r.When)
	}
	writeSection(b, "Summary", sb.String())
}

// benchP99 finds the p99-ns figure of the benchmark line named name in go test output.
func benchP99(out, name string) (float64, bool) {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		// Names end in -GOMAXPROCS.
		if i := strings.LastIndexByte(f[0], '-'); i < 0 || f[0][:i] != name {
			continue
		}
		for i := 1; i < len(f); i++ {
			if f[i] == "p99-ns" {
				v, err := strconv.ParseFloat(f[i-1], 64)
				return v, err == nil
			}
		}
	}
	return 0, false
}

func TestBenchP99(t *testing.T) {
	out := "BenchmarkFleetQuery/ByIndex-2   20000  5064 ns/op  4507 p50-ns  15132 p99-ns\n" +
		"BenchmarkFleetQuery/ByIndexRandomValue-2  20000  53141 ns/op  43906 p50-ns  109412 p99-ns\n" +
		"BenchmarkFleetQuery/ByIndexRandomValue-B-2  20000  53667 ns/op  44607 p50-ns  120009 p99-ns\n"
	for name, want := range map[string]float64{
		"BenchmarkFleetQuery/ByIndex": 15132, "BenchmarkFleetQuery/ByIndexRandomValue": 109412, "BenchmarkFleetQuery/ByIndexRandomValue-B": 120009,
	} {
		if got, ok := benchP99(out, name); !ok || got != want {
			t.Errorf("%s: got %v %v, want %v", name, got, ok, want)
		}
	}
	if _, ok := benchP99(out, "BenchmarkFleetQuery/Missing"); ok {
		t.Error("found a benchmark that is not there")
	}
}
