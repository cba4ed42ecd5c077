package e2e

import (
	"fmt"
	"maps"
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
// while ConfigMaps are written in every member. The replicas sync one cluster at a time
// (--max-warmups 1). A member that turns unhealthy stays served, through a rolling restart of
// the replicas. Profiles that appear unhealthy wait, owned but listing nothing and taking no
// warm-up slot; one of them joins once healthy. Every answer, and a client-go reflector on
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
	for _, m := range all[:len(all)-1] {
		inv.Set(m, "True", harness.AccessTo(t, mustCluster(t, env, m), "fleet-tokens"))
	}

	// r1 takes the inventory from flags (the management cluster's kubeconfig); r2 from its config
	// file, with a kubeconfig of the inventory's own. The file is the replicas' TLS config
	// (peerPKI's) with the inventory added.
	r1 := e.start("r1", "--max-warmups", "1")
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
	r2 := e.start("r2", "--max-warmups", "1")
	rs := []replica{r1, r2}
	fos := []*follower{e.follow(r1), e.follow(r2)}
	want := map[string]string{}
	for _, m := range all[:len(all)-1] {
		want[m] = "Synced"
	}
	e.members = all[:len(all)-1]
	e.clustersAre("two replicas over the inventory", rs, nil, want)
	e.equalTruth("two replicas over the inventory", rs, time.Minute)

	// From here on, writes in every member, the late one too; answers are compared with the
	// API servers once they stop.
	e.members = all
	w := e.writeOps(10, true)

	// A member turns unhealthy: every replica reports it Degraded with the profile's condition,
	// and it is still served.
	sick := all[0]
	inv.Set(sick, "False", harness.AccessTo(t, mustCluster(t, env, sick), "fleet-tokens"))
	want[sick] = "Degraded"
	e.clustersAre(sick+" unhealthy", rs, nil, want)

	// A rolling restart while it is unhealthy: each replica in turn stops (its clusters move to
	// the other) and starts again. A replica that finds the profile unhealthy when it starts
	// takes it as joined: the cluster stays served throughout. Had its objects left an answer
	// meanwhile, the reflectors (which follow through the restarts, listing again when a
	// replica is gone) would have been told of their deletion: checked at the end.
	for i, r := range rs {
		addr := strings.TrimPrefix(r.d.URL, "https://")
		if err := r.d.Stop(t); err != nil {
			t.Fatalf("stop %s: %v", r.id, err)
		}
		others := slices.Delete(slices.Clone(rs), i, i+1)
		e.clustersAre(r.id+" stopped", others, map[string]bool{r.id: true}, want)
		rs[i] = e.startAt(r.id, addr, "--max-warmups", "1")
		e.clustersAre(r.id+" back", rs, nil, want)
	}

	// The late profile and five that stay unhealthy ("never-0" … "never-4", aliases of a
	// member) appear while the replicas run. Every profile is in the fleet, owned by one
	// replica (the replicas agree on the fleet); these wait, Pending at both replicas, listing
	// nothing.
	inv.Set(late, "False", harness.AccessTo(t, mustCluster(t, env, late), "fleet-tokens"))
	want[late] = "Pending"
	for i := range 5 {
		name := fmt.Sprintf("never-%d", i)
		inv.Set(name, "False", harness.AccessTo(t, mustCluster(t, env, all[1]), "fleet-tokens"))
		want[name] = "Pending"
	}
	owners := e.clustersAre(late+" and the never-* waiting", rs, nil, want)
	t.Logf("owners %v", owners)
	// The late profile turns healthy: it joins under the writes, though each replica holds
	// some of the never-* (with one warm-up slot each: a waiting cluster takes none).
	inv.Set(late, "True", harness.AccessTo(t, mustCluster(t, env, late), "fleet-tokens"))
	want[late] = "Synced"
	e.clustersAre(late+" joined", rs, nil, want)

	// Writes run for a while after the restart too.
	harness.WaitFor(t, "300 writes", time.Minute, func() bool { return w.writes.Load() >= 300 })
	w.end()
	e.equalTruth("final", rs, time.Minute)
	e.followersEqualTruth("final", fos, time.Minute)
	for _, fo := range fos {
		if n := fo.invented.Load(); n > 0 {
			t.Errorf("the reflector on %s was told %d times of the deletion of an object never deleted", fo.r.id, n)
		}
	}
	t.Logf("%d writes (%d failed)", w.writes.Load(), w.errs.Load())
}

// clustersAre waits until every cluster of want is owned by a live replica and every replica
// of rs reports exactly want's clusters, each in its state at its owner: a Pending one waiting
// for its control plane, a Degraded one with its profile's condition. It returns the owners.
func (e *scaleEnv) clustersAre(what string, rs []replica, dead map[string]bool, want map[string]string) map[string]string {
	e.t.Helper()
	names := slices.Sorted(maps.Keys(want))
	var owners map[string]string
	harness.WaitFor(e.t, what, 2*time.Minute, func() bool {
		h, renewed, err := e.fences(e.ctx)
		if err != nil || len(unowned(names, h, renewed, dead)) > 0 {
			return false
		}
		for _, r := range rs {
			var cl api.Clusters
			if e.get(r, api.ClustersPath, &cl) != nil || len(cl.Clusters) != len(want) {
				return false
			}
			for _, c := range cl.Clusters {
				state, ok := want[c.Name]
				if !ok || c.State != state || c.Owner != h[c.Name] {
					return false
				}
				switch state {
				case "Pending":
					if !strings.Contains(c.Error, "waiting for its control plane to be healthy") {
						return false
					}
				case "Degraded":
					if !strings.Contains(c.Error, "ControlPlaneHealthy is False") {
						return false
					}
				}
			}
		}
		owners = h
		return true
	})
	return owners
}

func mustCluster(t *testing.T, env *harness.Env, name string) *fleet.Cluster {
	t.Helper()
	c, err := env.Fleet.Cluster(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
