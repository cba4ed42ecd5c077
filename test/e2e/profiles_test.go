package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// TestClusterProfileReplicas: two sharded replicas read their fleet from a ClusterProfile
// inventory in the management cluster (fleet-1), reaching the members through an exec plugin,
// while ConfigMaps are written in every member. A profile that turns healthy joins at one
// owner; one that turns unhealthy stays served. Every answer, and a client-go reflector on
// each replica (which lists again on 410), ends equal to what the members' API servers list,
// and no reflector is told of the deletion of an object that was never deleted.
func TestClusterProfileReplicas(t *testing.T) {
	e, env := newScaleEnv(t, 4)
	mgmt, _ := env.Fleet.Cluster(e.mgmtCtx)
	inv := harness.InstallInventory(e.ctx, t, mgmt.AdminConfig())
	providers := harness.WriteProviderFile(t, fleet.BuildExecPluginT(t), env.Fleet.Dir, "")
	e.source = []string{"--cluster-profiles", harness.InventoryNamespace, "--cluster-profile-provider-file", providers}
	e.stable = func(key string) bool { return strings.Contains(key, "|"+scaleNS+"/cm-") }
	all := slices.Clone(e.members)
	late := all[len(all)-1]
	for _, m := range all {
		c, _ := env.Fleet.Cluster(m)
		health := "True"
		if m == late {
			health = "False" // it waits
		}
		inv.Set(m, health, harness.AccessTo(t, c, "fleet-tokens"))
	}

	w := e.writeOps(10, true) // in every member, the late one too
	e.members = all[:len(all)-1]
	// r1 takes the inventory from flags (the management cluster's kubeconfig); r2 from its config
	// file, with a kubeconfig of the inventory's own. The file is the replicas' TLS config
	// (peerPKI's) with the inventory added.
	r1 := e.start("r1")
	tlsCfg, err := os.ReadFile(e.tls.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(t.TempDir(), "profiles.yaml")
	cfgYAML := fmt.Sprintf("%s\nclusters:\n  clusterProfiles:\n    namespace: %s\n    providerFile: %s\n    kubeconfig: %s\n    context: %s\n",
		tlsCfg, harness.InventoryNamespace, providers, env.Fleet.AdminKubeconfig(), e.mgmtCtx)
	if err := os.WriteFile(cfgFile, []byte(cfgYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	e.source, e.tls.cfg = []string{}, cfgFile
	r2 := e.start("r2")
	rs := []replica{r1, r2}
	fos := []*follower{e.follow(r1), e.follow(r2)}
	owners := e.settled("two replicas over the inventory", rs, nil, 2*time.Minute)
	t.Logf("owners %v", owners)
	if _, ok := owners[late]; ok {
		t.Fatalf("%s joined while its control plane was unhealthy", late)
	}
	e.equalTruth("before "+late+" is healthy", rs, time.Minute)

	// The late profile turns healthy: it joins, at one owner, under the writes.
	inv.Set(late, "True", harness.AccessTo(t, mustCluster(t, env, late), "fleet-tokens"))
	e.members = all
	owners = e.settled(late+" joined", rs, nil, 2*time.Minute)
	t.Logf("owners %v", owners)
	e.equalTruth(late+" joined", rs, time.Minute)
	e.followersEqualTruth(late+" joined", fos, time.Minute)

	// A member turns unhealthy: every replica reports it Degraded with the profile's condition,
	// and it is still served.
	sick := all[0]
	inv.Set(sick, "False", harness.AccessTo(t, mustCluster(t, env, sick), "fleet-tokens"))
	harness.WaitFor(t, sick+" Degraded at every replica", time.Minute, func() bool {
		for _, r := range rs {
			var cl api.Clusters
			if e.get(r, api.ClustersPath, &cl) != nil {
				return false
			}
			i := slices.IndexFunc(cl.Clusters, func(c api.Cluster) bool { return c.Name == sick })
			if i < 0 || cl.Clusters[i].State != "Degraded" || !strings.Contains(cl.Clusters[i].Error, "ControlPlaneHealthy is False") {
				return false
			}
		}
		return true
	})

	w.end()
	if w.writes.Load() == 0 {
		t.Fatal("no write went through")
	}
	e.equalTruth("final", rs, time.Minute)
	e.followersEqualTruth("final", fos, time.Minute)
	for _, fo := range fos {
		if n := fo.invented.Load(); n > 0 {
			t.Errorf("the reflector on %s was told %d times of the deletion of an object never deleted", fo.r.id, n)
		}
	}
	t.Logf("%d writes (%d failed)", w.writes.Load(), w.errs.Load())
}

func mustCluster(t *testing.T, env *harness.Env, name string) *fleet.Cluster {
	t.Helper()
	c, err := env.Fleet.Cluster(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
