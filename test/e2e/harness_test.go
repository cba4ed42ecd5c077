package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/multicache/multicache/pkg/api"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds cmd/multicache once per test run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "multicache-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "multicache")
		out, err := exec.Command("go", "build", "-o", binPath, "../../cmd/multicache").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// daemon is a running `multicache serve`.
type daemon struct {
	url    string
	cmd    *exec.Cmd
	log    string
	token  string
	done   chan error
	client *http.Client
}

// startDaemon runs the binary with args plus --listen on a free port, waits for /readyz, and
// stops it (SIGTERM, then SIGKILL) when the test ends.
func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	return startDaemonAt(t, "http", http.DefaultClient, freePort(t), args...)
}

// startDaemonAt is startDaemon on addr, reached with client over scheme (http or https).
func startDaemonAt(t *testing.T, scheme string, client *http.Client, addr string, args ...string) *daemon {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "multicache.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary(t), append([]string{"serve", "--listen", addr, "--log-format", "console"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{url: scheme + "://" + addr, cmd: cmd, log: logPath, done: make(chan error, 1), client: client}
	go func() { d.done <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() { d.stop(t) })
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case err := <-d.done:
			d.done <- err
			b, _ := os.ReadFile(logPath)
			t.Fatalf("daemon exited (%v):\n%s", err, b)
		default:
		}
		resp, err := client.Get(d.url + "/readyz")
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

// stop sends SIGTERM and waits; it reports how the process ended.
func (d *daemon) stop(t *testing.T) error {
	if d.cmd.ProcessState != nil {
		return nil
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		d.done <- err
		return err
	case <-time.After(15 * time.Second):
		_ = d.cmd.Process.Kill()
		err := <-d.done
		d.done <- err
		t.Errorf("daemon did not exit 15s after SIGTERM")
		return err
	}
}

// get fetches path with query q and decodes a 200 into out; other codes return an *api.Error.
func (d *daemon) get(ctx context.Context, path string, q url.Values, out any) (int, *api.Error, error) {
	u := d.url + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if d.token != "" {
		req.Header.Set("Authorization", "Bearer "+d.token)
	}
	resp, err := d.client.Do(req)
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

type objectMeta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	UID             string            `json:"uid"`
	ResourceVersion string            `json:"resourceVersion"`
	Labels          map[string]string `json:"labels"`
}

type apiObject struct {
	Kind       string     `json:"kind"`
	APIVersion string     `json:"apiVersion"`
	Metadata   objectMeta `json:"metadata"`
}

// listItem is an api.Item with its object's kind and metadata decoded.
type listItem struct {
	Cluster string    `json:"cluster"`
	Object  apiObject `json:"object"`
}

// decoded decodes it's object.
func decoded(it api.Item) (listItem, error) {
	out := listItem{Cluster: it.Cluster}
	return out, json.Unmarshal(it.Object, &out.Object)
}

func (it listItem) key() string {
	return it.Cluster + "|" + strings.TrimPrefix(it.Object.Metadata.Namespace+"/", "/") + it.Object.Metadata.Name
}

// TestMain removes the binary built for the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}
