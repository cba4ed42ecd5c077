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
// while ConfigMaps are written in every member. A profile that appears unhealthy waits, owned
// but listing nothing, and joins once healthy; one that turns unhealthy stays served, through
// a rolling restart of the replicas too. Every answer, and a client-go reflector on
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
	// The late profile appears, unhealthy, while the replicas run.
	inv.Set(late, "False", harness.AccessTo(t, mustCluster(t, env, late), "fleet-tokens"))
	// Every profile is in the fleet, owned by one replica (the replicas agree on the fleet);
	// the late one waits: Pending at both, listing nothing.
	e.members = all
	harness.WaitFor(t, "two replicas over the inventory, "+late+" waiting", 2*time.Minute, func() bool {
		h, renewed, err := e.fences(e.ctx)
		if err != nil || len(unowned(all, h, renewed, nil)) > 0 {
			return false
		}
		for _, r := range rs {
			var cl api.Clusters
			if e.get(r, api.ClustersPath, &cl) != nil || len(cl.Clusters) != len(all) {
				return false
			}
			for _, c := range cl.Clusters {
				want := "Synced"
				if c.Name == late {
					want = "Pending"
					if !strings.Contains(c.Error, "waiting for its control plane to be healthy") {
						return false
					}
				}
				if c.State != want || c.Owner != h[c.Name] {
					return false
				}
			}
		}
		return true
	})
	e.members = all[:len(all)-1] // the truth: the late member's objects are not served yet
	e.equalTruth("before "+late+" is healthy", rs, time.Minute)

	// From here on, writes in every member, the late one too; answers are compared with the
	// API servers once they stop.
	e.members = all
	w := e.writeOps(10, true)
	// The late profile turns healthy: it joins, at one owner, under the writes.
	inv.Set(late, "True", harness.AccessTo(t, mustCluster(t, env, late), "fleet-tokens"))
	owners := e.settled(late+" joined", rs, nil, 2*time.Minute)
	t.Logf("owners %v", owners)

	// A member turns unhealthy: every replica reports it Degraded with the profile's condition,
	// and it is still served.
	sick := all[0]
	inv.Set(sick, "False", harness.AccessTo(t, mustCluster(t, env, sick), "fleet-tokens"))
	e.servedDegraded(sick+" unhealthy", sick, rs, nil)

	// A rolling restart while it is unhealthy: each replica in turn stops (its clusters move to
	// the other) and starts again. A replica that finds the profile unhealthy when it starts
	// takes it as joined: the cluster stays served throughout.
	for i, r := range rs {
		addr := strings.TrimPrefix(r.d.URL, "https://")
		if err := r.d.Stop(t); err != nil {
			t.Fatalf("stop %s: %v", r.id, err)
		}
		others := slices.Delete(slices.Clone(rs), i, i+1)
		e.servedDegraded(r.id+" stopped", sick, others, map[string]bool{r.id: true})
		rs[i] = e.startAt(r.id, addr)
		e.servedDegraded(r.id+" back", sick, rs, nil)
	}
	// Had the unhealthy cluster's objects left an answer meanwhile, the reflectors (which
	// follow through the restarts, listing again when a replica is gone) would have been told
	// of their deletion: checked below, with the final state, once the writes stop.

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

// servedDegraded waits until every member is owned by a live replica and every replica of rs
// reports every member at its owner: sick Degraded with its profile's condition, the others
// Synced.
func (e *scaleEnv) servedDegraded(what, sick string, rs []replica, dead map[string]bool) {
	e.t.Helper()
	harness.WaitFor(e.t, what+": "+sick+" served, Degraded", 2*time.Minute, func() bool {
		h, renewed, err := e.fences(e.ctx)
		if err != nil || len(unowned(e.members, h, renewed, dead)) > 0 {
			return false
		}
		for _, r := range rs {
			var cl api.Clusters
			if e.get(r, api.ClustersPath, &cl) != nil || len(cl.Clusters) != len(e.members) {
				return false
			}
			for _, c := range cl.Clusters {
				want := "Synced"
				if c.Name == sick {
					want = "Degraded"
					if !strings.Contains(c.Error, "ControlPlaneHealthy is False") {
						return false
					}
				}
				if c.State != want || c.Owner != h[c.Name] {
					return false
				}
			}
		}
		return true
	})
}

func mustCluster(t *testing.T, env *harness.Env, name string) *fleet.Cluster {
	t.Helper()
	c, err := env.Fleet.Cluster(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
