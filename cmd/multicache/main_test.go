package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/config"
	"github.com/multicache/multicache/pkg/storage/peer"
)

func items(objs ...string) *api.List {
	l := &api.List{Clusters: []api.ClusterFreshness{{Name: "c1", Synced: true}}}
	for i, o := range objs {
		l.Items = append(l.Items, api.Item{Cluster: []string{"c1", "c2"}[i%2], Object: json.RawMessage(o)})
	}
	return l
}

const pod = `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","creationTimestamp":"2020-01-01T00:00:00Z"},
"spec":{"nodeName":"n1","containers":[{"name":"a","image":"nginx"},{"name":"b","image":"envoy"}]},
"status":{"phase":"Running","containerStatuses":[{"ready":true}]}}`

func TestPrintItems(t *testing.T) {
	for _, tc := range []struct {
		output string
		list   *api.List
		want   []string
	}{
		{"table", items(pod, pod), []string{"CLUSTER   NAMESPACE   NAME   READY   STATUS    NODE   AGE", "c1        ns          p      1/2     Running   n1     ", "c2        ns"}},
		{"wide", items(pod), []string{"IMAGES", "nginx,envoy"}},
		{"name", items(pod, `{"kind":"Node","metadata":{"name":"n1"}}`), []string{"c1/pod/p", "c2/node/n1"}},
		{"table", items(`{"kind":"Node","metadata":{"name":"n1","labels":{"topology.kubernetes.io/zone":"z1"}}}`), []string{"CLUSTER   NAME   ZONE   AGE", "c1        n1     z1     <none>"}},
		{"table", items(), []string{"No resources found."}},
		{"json", items(pod), []string{`"items": [`, `"cluster": "c1"`, `"kind": "Pod"`, `"clusters": [`}},
		{"yaml", items(pod), []string{"items:", "- cluster: c1", "    kind: Pod"}},
	} {
		var out bytes.Buffer
		if err := printItems(&out, tc.list, tc.output); err != nil {
			t.Fatalf("-o %s: %v", tc.output, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("-o %s: output lacks %q:\n%s", tc.output, w, out.String())
			}
		}
	}
	if err := printItems(&bytes.Buffer{}, items(`{not json`), "table"); err == nil {
		t.Error("a malformed object printed without an error")
	}
}

func TestPrintClusters(t *testing.T) {
	ls := time.Now().Add(-90 * time.Second)
	resp := &api.Clusters{Clusters: []api.Cluster{
		{Name: "c1", State: "Synced", LastSync: &ls, Resources: []api.Resource{{Resource: "pods", State: "Synced", Objects: 3}, {Resource: "widgets", State: "NotServed"}}},
		{Name: "c2", State: "Failed", Error: strings.Repeat("x", 100), Resources: []api.Resource{{Resource: "pods", State: "Failed", Error: "401"}}},
		{Name: "c3", State: "Syncing", Resources: []api.Resource{
			{Resource: "pods", State: "Syncing", Progress: &api.Progress{Loaded: 250, Expected: 1000, Listing: true}},
			{Resource: "configmaps", State: "Syncing", Progress: &api.Progress{Loaded: 50, Expected: 200, Listing: true}},
			{Resource: "secrets", State: "Synced", Objects: 7, Progress: &api.Progress{Loaded: 7, Expected: 7}},
		}},
		{Name: "c4", State: "Syncing", Resources: []api.Resource{
			{Resource: "pods", State: "Syncing", Progress: &api.Progress{Loaded: 30, Listing: true}},
		}},
	}}
	var out bytes.Buffer
	printClusters(&out, resp, false)
	for _, w := range []string{"NAME   STATE     SYNCED   OBJECTS   PROGRESS         LAST-SYNC   ERROR", "c1     Synced    2/2      3         -                1m", "c2     Failed    0/1      0", "xxx...",
		"c3     Syncing   1/3      7         300/1200 (25%)", "c4     Syncing   0/1      0         30/?"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
	out.Reset()
	printClusters(&out, resp, true)
	if !strings.Contains(out.String(), "c2        pods         Failed      0         -                401") || !strings.Contains(out.String(), "c3        pods         Syncing     0         250/1000 (25%)") {
		t.Errorf("per resource:\n%s", out.String())
	}
}

func TestServeFlagsOverrideTheFile(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte("resources: [{name: pods}]\nserver: {listen: 127.0.0.1:9000}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newServe()
	if err := cmd.ParseFlags([]string{"--config", cfg, "--listen", "127.0.0.1:9001", "--resource", "nodes", "--context", "prod-*"}); err != nil {
		t.Fatal(err)
	}
	var f serveFlags
	f.config, f.listen = cfg, "127.0.0.1:9001"
	f.resources, f.contexts = []string{"nodes"}, []string{"prod-*"}
	c, err := f.load(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.Listen != "127.0.0.1:9001" || len(c.Resources) != 1 || c.Resources[0].Name != "nodes" || c.Kubeconfig.Include[0] != "prod-*" {
		t.Errorf("flags did not override the file: %+v", c)
	}
	f = serveFlags{listen: "0.0.0.0:8080", resources: []string{"pods"}}
	cmd = newServe()
	_ = cmd.ParseFlags([]string{"--resource", "pods"})
	if _, err := f.load(cmd); err == nil || !strings.Contains(err.Error(), "server.listen") {
		t.Errorf("a non-loopback listen without auth: %v", err)
	}
}

func TestClientFlagsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		f    clientFlags
		flag string
	}{
		{clientFlags{server: "ftp://x"}, "--server"},
		{clientFlags{server: "http://127.0.0.1:1", caFile: "/nonexistent"}, "--certificate-authority"},
	} {
		if _, err := tc.f.client(); err == nil || !strings.HasPrefix(err.Error(), tc.flag+":") {
			t.Errorf("%+v: %v, want an error naming %s", tc.f, err, tc.flag)
		}
	}
}

// TestPeerCerts: `multicache peer-certs` makes a CA and per replica a certificate that the
// daemon takes as that replica's peer certificate; given the CA, it signs more with it.
func TestPeerCerts(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) error {
		cmd := newRoot()
		cmd.SetArgs(append([]string{"peer-certs", "--dir", dir}, args...))
		cmd.SetOut(&bytes.Buffer{})
		return cmd.Execute()
	}
	if err := run("r1", "r2"); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.crt")
	for _, id := range []string{"r1", "r2"} {
		tr, err := peer.LoadTrust(filepath.Join(dir, id+".crt"), filepath.Join(dir, id+".key"), ca, "")
		if err != nil || tr.Identity() != id {
			t.Errorf("%s: %v, %v", id, tr, err)
		}
	}
	caBefore, _ := os.ReadFile(ca)
	if err := run("--ca-cert", ca, "--ca-key", filepath.Join(dir, "ca.key"), "r3"); err != nil {
		t.Fatal(err)
	}
	if caAfter, _ := os.ReadFile(ca); !bytes.Equal(caBefore, caAfter) {
		t.Error("a run given the CA replaced it")
	}
	if _, err := peer.LoadTrust(filepath.Join(dir, "r3.crt"), filepath.Join(dir, "r3.key"), ca, "r3"); err != nil {
		t.Errorf("r3, signed by the given CA: %v", err)
	}
	if err := run("--ca-cert", ca, "r4"); err == nil || !strings.Contains(err.Error(), "--ca-cert and --ca-key go together") {
		t.Errorf("--ca-cert without --ca-key: %v", err)
	}
	if err := run("Not_A_Name"); err == nil {
		t.Error("an identity that is no DNS name was accepted")
	}
}

// TestServeFlagsReachTheConfig parses each of serve's flags as cobra does and checks the
// config field it sets, so a flag bound to the wrong field, or to none, fails here.
func TestServeFlagsReachTheConfig(t *testing.T) {
	tlsFile := filepath.Join(t.TempDir(), "tls.yaml")
	if err := os.WriteFile(tlsFile, []byte("server: {tls: {certFile: /s.crt, keyFile: /s.key}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sharded := []string{"--sharding", "--advertise-url", "https://127.0.0.1:8443", "--management-kubeconfig", "/k"}
	for _, tc := range []struct {
		args  []string
		check func(c *config.Config) bool
	}{
		{[]string{"--kubeconfig", "/a", "--kubeconfig", "/b"}, func(c *config.Config) bool {
			return len(c.Kubeconfig.Paths) == 2 && c.Kubeconfig.Paths[1] == "/b"
		}},
		{[]string{"--context", "a*", "--exclude-context", "a1"}, func(c *config.Config) bool {
			return c.Kubeconfig.Include[0] == "a*" && c.Kubeconfig.Exclude[0] == "a1"
		}},
		{[]string{"--resource", "configmaps"}, func(c *config.Config) bool {
			return len(c.Resources) == 2 && c.Resources[1].Name == "configmaps"
		}},
		{[]string{"--listen", "127.0.0.1:9009"}, func(c *config.Config) bool { return c.Server.Listen == "127.0.0.1:9009" }},
		{[]string{"--token-file", "/t"}, func(c *config.Config) bool { return c.Server.Auth != nil && c.Server.Auth.TokenFile == "/t" }},
		{[]string{"--profiling"}, func(c *config.Config) bool { return c.Server.Profiling }},
		{[]string{"--unpaged-list-max", "-1", "--unpaged-list-budget", "1234"}, func(c *config.Config) bool {
			return c.UnpagedListMax == -1 && c.UnpagedListBudget == 1234
		}},
		{[]string{"--sync-gc-percent", "0"}, func(c *config.Config) bool { return c.SyncGCPercent != nil && *c.SyncGCPercent == 0 }},
		{[]string{"--sync-gc-percent", "300"}, func(c *config.Config) bool { return c.SyncGCPercent != nil && *c.SyncGCPercent == 300 }},
		{[]string{"--gc-percent", "50"}, func(c *config.Config) bool { return c.GCPercent != nil && *c.GCPercent == 50 && c.SteadyGC() == 50 }},
		{[]string{"--memory-limit", "3Gi"}, func(c *config.Config) bool { return c.MemoryLimit == "3Gi" }},
		{[]string{"--disable-compression"}, func(c *config.Config) bool { return c.DisableCompression }},
		{[]string{"--disable-compression=false"}, func(c *config.Config) bool { return !c.DisableCompression }},
		{[]string{"--management-kubeconfig", "/m", "--management-context", "mc", "--cluster-secrets-namespace", "fleet"}, func(c *config.Config) bool {
			return c.Management.Kubeconfig == "/m" && c.Management.Context == "mc" && c.Sources.Secrets != nil && c.Sources.Secrets.Namespace == "fleet"
		}},
		{[]string{"--management-kubeconfig", "/m", "--cluster-profiles", "inv", "--cluster-profile-provider-file", "/p.json"}, func(c *config.Config) bool {
			p := c.Clusters.ClusterProfiles
			return p != nil && p.Namespace == "inv" && p.ProviderFile == "/p.json"
		}},
		{[]string{"--log-format", "json", "--log-level", "debug"}, func(c *config.Config) bool {
			return c.Logging.Format == "json" && c.Logging.Level == "debug"
		}},
		{append(sharded, "--sharding-namespace", "shards", "--replica-id", "r1", "--lease-duration", "20s", "--max-warmups", "7", "--max-handovers", "-1", "--shard-weight", "2"), func(c *config.Config) bool {
			s := c.Sharding
			return s != nil && s.Enabled && s.AdvertiseURL == "https://127.0.0.1:8443" && s.Namespace == "shards" && s.Identity == "r1" &&
				s.LeaseDuration.Duration == 20*time.Second && s.MaxWarmups == 7 && s.MaxHandovers == -1 && s.Weight == 2
		}},
		{append(sharded, "--takeover-gc-percent", "0"), func(c *config.Config) bool {
			return c.Sharding.TakeoverGCPercent != nil && *c.Sharding.TakeoverGCPercent == 0
		}},
		{append(sharded, "--takeover-gc-percent", "200"), func(c *config.Config) bool {
			return c.Sharding.TakeoverGCPercent != nil && *c.Sharding.TakeoverGCPercent == 200
		}},
		{append(sharded, "--config", tlsFile, "--peer-cert-file", "/c", "--peer-key-file", "/k2", "--peer-ca-file", "/ca"), func(c *config.Config) bool {
			s := c.Sharding
			return s.PeerCertFile == "/c" && s.PeerKeyFile == "/k2" && s.PeerCAFile == "/ca" && c.Server.TLS.CertFile == "/s.crt"
		}},
	} {
		cmd, f := serveCommand()
		args := append([]string{"--resource", "pods"}, tc.args...)
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		c, err := f.load(cmd)
		if err != nil {
			t.Errorf("%v: %v", args, err)
			continue
		}
		if !tc.check(c) {
			t.Errorf("%v did not reach the config: %+v (sharding %+v)", args, c, c.Sharding)
		}
	}
	// Unset, the GC percents stay nil: the defaults (-1) are the daemon's, not the flags'.
	cmd, f := serveCommand()
	if err := cmd.ParseFlags(append([]string{"--resource", "pods"}, sharded...)); err != nil {
		t.Fatal(err)
	}
	c, err := f.load(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if c.SyncGCPercent != nil || c.GCPercent != nil || c.Sharding.TakeoverGCPercent != nil || c.DisableCompression {
		t.Errorf("unset flags changed the config: sync %v, steady %v, takeover %v, compression off %v", c.SyncGCPercent, c.GCPercent, c.Sharding.TakeoverGCPercent, c.DisableCompression)
	}
}
