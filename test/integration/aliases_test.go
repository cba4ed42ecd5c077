package integration

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"k8s.io/client-go/rest"

	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/sources"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// TestAliasedFleet: a kubeconfig of aliases (fleet.WriteAliases) is, to a Registry, a cluster
// per alias, each holding exactly what its API server lists.
func TestAliasedFleet(t *testing.T) {
	env := harness.Start(t, harness.Options{Clusters: 2, Timeout: 5 * time.Minute})
	ctx, f := env.Ctx, env.Fleet
	path := filepath.Join(t.TempDir(), "aliases.kubeconfig")
	names, err := f.WriteAliases(path, 3)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, c := range f.Names() {
		for k := 1; k <= 3; k++ {
			want = append(want, fleet.AliasName(c, k))
		}
	}
	if !slices.Equal(names, want) {
		t.Fatalf("aliases %v, want %v", names, want)
	}
	if _, err := f.WriteAliases(path, 0); err == nil {
		t.Error("0 aliases per cluster was accepted")
	}
	src, err := sources.NewKubeconfig(sources.KubeconfigOptions{Paths: []string{path}})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := clusterset.New(clusterset.Options{Source: src, Logger: zaptest.NewLogger(t), Resources: []clusterset.ResourceSpec{{Name: "configmaps"}}})
	if err != nil {
		t.Fatal(err)
	}
	env.Run(reg)
	if missing := reg.WaitForSync(ctx, 2*time.Minute); missing != nil {
		t.Fatalf("unsynced: %v", missing)
	}
	if got := reg.Clusters(); !slices.Equal(got, names) {
		t.Fatalf("the Registry's clusters %v, want the aliases %v", got, names)
	}
	// Each alias holds what its cluster's API server lists.
	servers := map[string]*rest.Config{}
	for i, c := range f.Clusters {
		for k := 1; k <= 3; k++ {
			servers[fleet.AliasName(f.Names()[i], k)] = c.AdminConfig()
		}
	}
	agg, _ := reg.Aggregate("configmaps")
	report := harness.Converge(ctx, t, agg, cmGVR, servers, 30*time.Second)
	t.Logf("%d aliases of %d API servers, each equal to its server: %s", len(names), len(f.Clusters), report.Summary())
}
