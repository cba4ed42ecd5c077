package server

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/multicache/multicache/internal/fakeapi"
	"github.com/multicache/multicache/pkg/clusterset"
)

// TestManyClustersSyncingReachPython: a list over 150 clusters that are still syncing warns of
// them, and the official Python client still reads it. Each cluster was one Warning header:
// Python's http.client refuses an answer with more than 100 headers ("got more than 100
// headers"), so during a wide fleet's sync, or while a dead replica's clusters move, every
// list from python3-kubernetes failed.
func TestManyClustersSyncingReachPython(t *testing.T) {
	a, slow := fakeapi.New(t), fakeapi.New(t)
	in := pod("in-a")
	in.Spec.Containers = []corev1.Container{{Name: "app", Image: "nginx"}} // the Python client requires them
	a.SetPods([]corev1.Pod{in})
	slow.SetSlow(true)
	t.Cleanup(func() { slow.SetSlow(false) })
	src := clusterset.Static{{Name: "a", Config: a.Config(), Fingerprint: "1"}}
	for i := range 150 {
		src = append(src, clusterset.ClusterConfig{Name: "s" + strconv.Itoa(i), Config: slow.Config(), Fingerprint: "1"})
	}
	s := startedServer(t, src)
	waitUntil(t, "a synced", 10*time.Second, func() bool {
		ca, _ := s.reg.ClusterStatus("a")
		return ca.State == clusterset.Synced
	})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	code, h, body := do(t, hs, "GET", "/api/v1/pods", "")
	if code != 200 || !strings.Contains(string(body), "in-a") {
		t.Fatalf("list while 150 clusters sync: %d %.300s", code, body)
	}
	warnings := h.Values("Warning")
	if len(warnings) < 10 || len(warnings) > 60 || !strings.Contains(warnings[len(warnings)-1], "more warnings not shown") {
		t.Fatalf("%d warnings, want at least 10 and a last one that counts the rest: %q", len(warnings), warnings)
	}

	if err := exec.Command("/usr/bin/python3", "-c", "import kubernetes").Run(); err != nil {
		msg := "the official Python client is not installed (/usr/bin/python3 -c 'import kubernetes' fails); `make tools` installs Debian's python3-kubernetes"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	const list = `
import sys
from kubernetes import client
cfg = client.Configuration()
cfg.host = sys.argv[1]
pods = client.CoreV1Api(client.ApiClient(cfg)).list_pod_for_all_namespaces(_request_timeout=30)
print(",".join(p.metadata.name for p in pods.items))
`
	out, err := exec.CommandContext(t.Context(), "/usr/bin/python3", "-c", list, hs.URL).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "in-a" {
		t.Fatalf("python3-kubernetes list while 150 clusters sync: %v\n%s", err, out)
	}
}
