package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartT starts a fleet for a test and stops it in t.Cleanup, which also runs when the test
// fails or panics. It fails the test if the binaries are missing: `make test` builds them.
func StartT(t testing.TB, opts Options) *Fleet {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start fleet: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Errorf("stop fleet: %v", err)
		}
	})
	return f
}

// BuildExecPluginT builds the exec credential plugin test/fleet/cmd/execplugin into a temporary
// directory of the test and returns its path. The test must run inside this module's checkout:
// the plugin is built from its root, found by walking up from the working directory.
func BuildExecPluginT(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("build exec plugin: %v", err)
	}
	root, ok := checkoutRoot(wd)
	if !ok {
		t.Fatalf("build exec plugin: no checkout of github.com/multicache/multicache (hack/build-tools.sh) above %s", wd)
	}
	bin := filepath.Join(t.TempDir(), "execplugin")
	cmd := exec.Command("go", "build", "-o", bin, "./test/fleet/cmd/execplugin")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build exec plugin in %s: %v\n%s", root, err, out)
	}
	return bin
}

// CPUSeconds returns the CPU time (user+system) each of the fleet's live processes has used,
// keyed "fleet-1/kube-apiserver", "fleet-1/etcd", …, plus "self" for this process. Subtracting
// two readings tells where the CPU went during a run.
func (f *Fleet) CPUSeconds() map[string]float64 {
	out := map[string]float64{"self": procCPU(os.Getpid())}
	for _, c := range f.Clusters {
		for name, p := range map[string]*proc{"kube-apiserver": c.APIServer, "etcd": c.Etcd, "kube-controller-manager": c.CM} {
			if p.alive() {
				out[c.Name+"/"+name] = procCPU(p.PID)
			}
		}
	}
	return out
}

// procCPU reads utime+stime of pid from /proc, in seconds (USER_HZ is 100 on Linux).
func procCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	// After the command: state(0) ppid(1) … utime(11) stime(12).
	if len(fields) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(fields[11], 64)
	st, _ := strconv.ParseFloat(fields[12], 64)
	return (u + st) / 100
}

// CPUSplit summarises two CPUSeconds readings taken wall apart, by process kind (etcd,
// kube-apiserver, …, "self" for this process): CPU-seconds and share of the total, and the
// CPU-seconds the machine had.
func CPUSplit(before, after map[string]float64, wall time.Duration) string {
	kinds := map[string]float64{}
	total := 0.0
	for k, v := range after {
		d := v - before[k]
		kinds[k[strings.LastIndexByte(k, '/')+1:]] += d
		total += d
	}
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s %.1f CPU-s (%.0f%%)", k, kinds[k], 100*kinds[k]/max(total, 1e-9)))
	}
	return fmt.Sprintf("%s; %.1f CPU-s used over %s, %d cores = %.1f CPU-s available",
		strings.Join(parts, ", "), total, wall.Round(time.Millisecond), runtime.NumCPU(), float64(runtime.NumCPU())*wall.Seconds())
}
