package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/test/fleet"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds cmd/multicache once per test process and returns its path. RemoveBinary
// removes it (call it from TestMain).
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "multicache-test-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "multicache")
		// The daemon is its own module (it requires k8s.io/kubernetes for the printers).
		_, self, _, _ := runtime.Caller(0)
		cmd := exec.Command("go", "build", "-o", binPath, ".")
		cmd.Dir = filepath.Join(filepath.Dir(self), "..", "..", "cmd", "multicache")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

var (
	commitMu   sync.Mutex
	commitBins = map[string]string{} // a commit's built daemon, by commit; a failed build is not kept
)

// BinaryAt builds cmd/multicache as commit ref of this checkout holds it (a release the
// daemon is updated from), once per test process, and returns its path. The test is skipped,
// saying so, when the checkout does not hold the commit (a shallow clone). RemoveBinary
// removes what it built.
func BinaryAt(t testing.TB, ref string) string {
	t.Helper()
	commitMu.Lock()
	defer commitMu.Unlock()
	if p, ok := commitBins[ref]; ok {
		return p
	}
	// The checkout the test runs in (its working directory is its package's).
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("the test does not run in a git checkout, from whose history it builds commit %s's daemon: %v", ref, err)
	}
	root := strings.TrimSpace(string(top))
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", ref+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("this checkout does not hold commit %s (a shallow clone?), whose daemon the test runs: %v %s", ref, err, out)
	}
	dir, err := os.MkdirTemp("", "multicache-test-bin-")
	if err != nil {
		t.Fatal(err)
	}
	src, bin := filepath.Join(dir, "src"), filepath.Join(dir, "multicache")
	built := false
	defer func() {
		// The sources go; a failed build leaves nothing behind.
		_ = os.RemoveAll(src)
		if !built {
			_ = os.RemoveAll(dir)
		}
	}()
	// The commit's files, read from the history: the checkout's .git is only read (no
	// worktree to register, no hooks run).
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", ref)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var archiveErr, untarErr strings.Builder
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := untar.Start(); err != nil {
		t.Fatalf("commit %s: tar: %v", ref, err)
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		t.Fatalf("commit %s: git archive: %v %s", ref, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("commit %s: tar: %v %s", ref, err, untarErr.String())
	}
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join(src, "cmd", "multicache")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("commit %s: build: %v\n%s", ref, err, out)
	}
	built = true
	commitBins[ref] = bin
	return bin
}

// RemoveBinary removes what Binary and BinaryAt built.
func RemoveBinary() {
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	commitMu.Lock()
	defer commitMu.Unlock()
	for _, p := range commitBins {
		_ = os.RemoveAll(filepath.Dir(p))
	}
}

// FreePort returns a free 127.0.0.1:port, chosen below the kernel's ephemeral range so that
// no outgoing connection takes it before the daemon binds it (fleet.FreePorts says why).
func FreePort(t testing.TB) string {
	t.Helper()
	addr, err := fleet.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// Daemon is a running `multicache serve`.
type Daemon struct {
	URL    string
	Cmd    *exec.Cmd
	Log    string // its log file
	Token  string // sent by Get when set
	Client *http.Client
	done   chan error
}

// StartDaemon runs the binary with args plus --listen on a free port, waits for /readyz, and
// stops it (SIGTERM, then SIGKILL) when the test ends.
func StartDaemon(t testing.TB, args ...string) *Daemon {
	t.Helper()
	return StartDaemonAt(t, "http", http.DefaultClient, FreePort(t), args...)
}

// StartDaemonAt is StartDaemon on addr, reached with client over scheme (http or https).
func StartDaemonAt(t testing.TB, scheme string, client *http.Client, addr string, args ...string) *Daemon {
	t.Helper()
	return StartBinaryAt(t, Binary(t), scheme, client, addr, args...)
}

// StartBinaryAt is StartDaemonAt of the daemon binary bin (BinaryAt: another release's).
func StartBinaryAt(t testing.TB, bin, scheme string, client *http.Client, addr string, args ...string) *Daemon {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "multicache.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"serve", "--listen", addr, "--log-format", "console"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &Daemon{URL: scheme + "://" + addr, Cmd: cmd, Log: logPath, done: make(chan error, 1), Client: client}
	go func() { d.done <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() { _ = d.Stop(t) })
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case err := <-d.done:
			d.done <- err
			b, _ := os.ReadFile(logPath)
			t.Fatalf("daemon exited (%v):\n%s", err, b)
		default:
		}
		resp, err := client.Get(d.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("daemon not ready in 2m:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop sends SIGTERM and waits; it reports how the process ended.
func (d *Daemon) Stop(t testing.TB) error {
	select {
	case err := <-d.done: // it has ended already
		d.done <- err
		return err
	default:
	}
	_ = d.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		d.done <- err
		return err
	case <-time.After(stopWithin):
		_ = d.Cmd.Process.Kill()
		err := <-d.done
		d.done <- err
		t.Errorf("daemon did not exit %s after SIGTERM", stopWithin)
		return err
	}
}

// stopWithin bounds a daemon's exit after SIGTERM. A sharded replica waits while its
// clusters' next owners take the states it kept, 10 s past the last take (up to 90 s).
const stopWithin = time.Minute

// Get fetches path with query q and decodes a 200 into out; other codes return an *api.Error.
func (d *Daemon) Get(ctx context.Context, path string, q url.Values, out any) (int, *api.Error, error) {
	u := d.URL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if d.Token != "" {
		req.Header.Set("Authorization", "Bearer "+d.Token)
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		var e api.Error
		if err := json.Unmarshal(b, &e); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("error body %q: %v", b, err)
		}
		return resp.StatusCode, &e, nil
	}
	return resp.StatusCode, nil, json.Unmarshal(b, out)
}
