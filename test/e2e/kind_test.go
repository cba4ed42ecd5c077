package e2e

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/multicache/multicache/test/harness"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/kind/pkg/cluster"
)

// TestKindProvider runs the daemon against real kind clusters. It is opt-in
// (MULTICACHE_E2E_KIND=1) and needs a Docker engine; `make test` never requires it.
func TestKindProvider(t *testing.T) {
	if os.Getenv("MULTICACHE_E2E_KIND") == "" {
		t.Skip("kind provider: opt-in, set MULTICACHE_E2E_KIND=1 (needs a Docker engine and the kindest/node image)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("kind provider: no Docker engine here (docker info: %v: %s)", err, strings.TrimSpace(string(out)))
	}
	p := cluster.NewProvider(cluster.ProviderWithDocker())
	merged := clientcmdapi.NewConfig()
	for _, name := range []string{"multicache-e2e-1", "multicache-e2e-2"} {
		if err := p.Create(name, cluster.CreateWithWaitForReady(3*time.Minute)); err != nil {
			t.Fatalf("kind create %s: %v", name, err)
		}
		t.Cleanup(func() { _ = p.Delete(name, "") })
		kc, err := p.KubeConfig(name, false)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.Load([]byte(kc))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range cfg.Clusters {
			merged.Clusters[k] = v
		}
		for k, v := range cfg.AuthInfos {
			merged.AuthInfos[k] = v
		}
		for k, v := range cfg.Contexts {
			merged.Contexts[k] = v
		}
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*merged, path); err != nil {
		t.Fatal(err)
	}
	d := harness.StartDaemon(t, "--kubeconfig", path, "--context", "kind-multicache-e2e-*", "--resource", "namespaces", "--resource", "pods")
	items, _ := listAll(context.Background(), t, d, "namespaces", url.Values{})
	perCluster := map[string]int{}
	for _, it := range items {
		perCluster[it.Cluster]++
	}
	if len(perCluster) != 2 || perCluster["kind-multicache-e2e-1"] < 4 {
		t.Errorf("namespaces per cluster: %v", perCluster)
	}
}
