package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/multicache/multicache/test/fleet"
)

// TestCLI drives the fleet command as scripts and `make fleet-up` do.
func TestCLI(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fleet")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "fleet-dir")
	run := func(wantOK bool, args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append(args, "--dir", dir)...).CombinedOutput()
		if (err == nil) != wantOK {
			t.Fatalf("fleet %s: err=%v, want ok=%v\n%s", strings.Join(args, " "), err, wantOK, out)
		}
		return string(out)
	}

	out := run(false, "status")
	if !strings.Contains(out, "no fleet in this directory") {
		t.Errorf("status without a fleet: %q", out)
	}
	out = run(true, "up", "--clusters", "2", "--aliases", "3")
	t.Cleanup(func() {
		// Stop by PID even if an assertion below failed.
		if f, err := fleet.Load(dir); err == nil {
			_ = f.Stop()
		}
	})
	if !strings.Contains(out, "fleet-1 fleet-2") || !strings.Contains(out, "aliases.kubeconfig (6 contexts, 3 per cluster") {
		t.Errorf("up output: %q", out)
	}
	if kc, err := clientcmd.LoadFromFile(filepath.Join(dir, "aliases.kubeconfig")); err != nil || len(kc.Contexts) != 6 || kc.Contexts["fleet-2-a03"] == nil {
		t.Errorf("aliases.kubeconfig: %v %v", err, kc)
	}
	f, err := fleet.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pids := f.PIDs()
	if len(pids) != 4 {
		t.Fatalf("want 4 live processes after up, have %v", pids)
	}
	if out := run(false, "up", "--clusters", "1"); !strings.Contains(out, "already there") {
		t.Errorf("second up: %q", out)
	}
	if out := run(false, "stop-apiserver", "--cluster", "fleet-9"); !strings.Contains(out, `cluster "fleet-9": not in this fleet`) {
		t.Errorf("unknown cluster: %q", out)
	}
	if out := run(false, "compact"); !strings.Contains(out, "--cluster is required") {
		t.Errorf("compact without --cluster: %q", out)
	}
	if out := run(false, "seed", "--objects", "0"); !strings.Contains(out, "--objects") {
		t.Errorf("seed --objects 0: %q", out)
	}
	out = run(true, "seed", "--objects", "200")
	if !strings.Contains(out, "created") {
		t.Errorf("seed: %q", out)
	}
	run(true, "compact", "--cluster", "fleet-2")
	run(true, "stop-apiserver", "--cluster", "fleet-1")
	if out := run(true, "status"); !strings.Contains(out, "apiserver=stopped") {
		t.Errorf("status after stop-apiserver: %q", out)
	}
	run(true, "start-apiserver", "--cluster", "fleet-1")

	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		for _, ctx := range []string{"fleet-1", "fleet-2"} {
			out, err := exec.Command(kubectl, "--kubeconfig", filepath.Join(dir, "kubeconfig"), "--context", ctx, "get", "ns", "load-0", "-o", "name").CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "namespace/load-0" {
				t.Errorf("kubectl --context %s get ns: %v %s", ctx, err, out)
			}
		}
	} else {
		t.Log("kubectl not on PATH: the kubeconfig is checked through client-go in the fleet package tests only")
	}

	f, err = fleet.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pids = f.PIDs()
	started := map[int]string{}
	for _, pid := range pids {
		started[pid] = procStart(pid)
	}
	run(true, "down")
	for _, pid := range pids {
		// Alive: the same process (its start time, so that a PID reused by another test's
		// process since does not count), and not a zombie.
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err == nil && procStart(pid) == started[pid] && !strings.Contains(string(b), ") Z ") {
			t.Errorf("pid %d alive after down", pid)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("dir left after down: %v", err)
	}
	if out := run(false, "down"); !strings.Contains(out, "no fleet") {
		t.Errorf("second down: %q", out)
	}
}

// procStart is a process's start time in clock ticks since boot (field 22 of /proc/PID/stat),
// "" when it cannot be read. With the PID, it names one process: PIDs are reused.
func procStart(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	// The command name, in parentheses, may hold spaces: count fields after its last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(string(b)[i+1:])
	if len(fields) < 20 {
		return ""
	}
	return fields[19] // field 22 overall: state is field 3, the first after ')'
}
