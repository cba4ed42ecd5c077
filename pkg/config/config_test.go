package config

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func repoFile(t *testing.T, rel string) string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..", rel)
}

func TestShippedConfigsLoad(t *testing.T) {
	for _, f := range []string{"configs/multicache.yaml", "configs/demo.yaml"} {
		c, err := Load(repoFile(t, f))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, err := c.ResourceSpecs(); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

func TestErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"resources: [{name: pods}]\nbogus: 1", `unknown field "bogus"`},
		{"resources: [{name: pods, colour: red}]", `unknown field "colour"`},
		{"resources: []", "resources: at least one resource"},
		{"resources: [{name: pods, indexes: [fastest]}]", "resources[0].indexes[0]: unknown index type"},
		{"resources: [{name: pods, mode: raw}]", "resources[0].mode"},
		{"resources: [{name: pods, counts: ['label:tier', cluster]}]", `resources[0].counts[1]: key "cluster": counts are kept of a key that reads the object itself`},
		{"resources: [{name: pods, indexes: [label], counts: ['index:image']}]", `resources[0].counts[0]: key "index:image": index "image" is not among this resource's indexes`},
		{"resources: [{name: pods, counts: ['field:spec.containers[']}]", "resources[0].counts[0]: "},
		{"resources: [{name: pods, labelSelector: 'a in (b'}]", "resources[0].labelSelector"},
		{"kubeconfig: {include: ['[']}\nresources: [{name: pods}]", "kubeconfig.include[0]: bad glob"},
		{"resources: [{name: pods}]\nindexes: [{name: x, cel: 'object.(', resources: [pods]}]", "indexes[0]: index \"x\": cel"},
		{"resources: [{name: pods}]\nindexes: [{name: x, jsonPath: '{.a[', resources: [pods]}]", "indexes[0]: index \"x\": jsonPath"},
		{"resources: [{name: pods}]\nindexes: [{name: x, cel: '1', resources: [nodes]}]", "indexes[0].resources[0]: \"nodes\" is not in resources"},
		{"resources: [{name: pods}]\nserver: {listen: '0.0.0.0:8080'}", "server.listen: 0.0.0.0:8080 is not loopback"},
		{"resources: [{name: pods}]\nserver: {requestTimeout: soon}", "duration \"soon\""},
		{"resources: [{name: pods}]\nlogging: {format: xml}", "logging.format"},
		{"resources: [{name: pods}]\nunpagedListBudget: -5", "unpagedListBudget: -5: must not be negative"},
		{"resources: [{name: pods}]\nsharding: {enabled: true, advertiseURL: 'https://a:1', peerCertFile: c.pem}", "sharding.peerCertFile and sharding.peerKeyFile go together"},
		{"resources: [{name: pods}]\nsharding: {enabled: true, advertiseURL: 'https://a:1', peerCertFile: c.pem, peerKeyFile: k.pem}", "sharding.peerCAFile: required with sharding.peerCertFile"},
		{"resources: [{name: pods}]\nsharding: {enabled: true, advertiseURL: 'https://a:1', peerCertFile: c.pem, peerKeyFile: k.pem, peerCAFile: ca.pem}", "sharding.peerCertFile: needs server.tls"},
		{"resources: [{name: pods}]\nserver: {tls: {certFile: s.pem, keyFile: s.key}}\nsharding: {enabled: true, advertiseURL: 'http://a:1', peerCertFile: c.pem, peerKeyFile: k.pem, peerCAFile: ca.pem}", "sharding.advertiseURL: \"http://a:1\": with sharding.peerCertFile, advertise an https URL"},
		{"resources: [{name: pods}]\nserver: {auth: {tokenFile: t}}\nsharding: {enabled: true, advertiseURL: 'https://a:1'}", "sharding: with server.auth, replicas trust each other by peer certificates only (no token leaves a replica): set sharding.peerCertFile, sharding.peerKeyFile, sharding.peerCAFile"},
		{"resources: [{name: pods}]\nserver: {auth: {mode: delegated}}\nsharding: {enabled: true, advertiseURL: 'https://a:1', peerCertFile: c.pem, peerKeyFile: k.pem}", "set sharding.peerCAFile ("},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.yaml, err, tc.want)
		}
	}
	if _, err := Parse([]byte("resources: [{name: pods}]\nserver: {listen: '0.0.0.0:8080', allowInsecure: true}")); err != nil {
		t.Errorf("allowInsecure: %v", err)
	}
}

// FuzzParse: no input panics the loader, and whatever it accepts validates and builds.
//
// Its seeds are small, one or two sections each (the example configs are tested whole by
// TestShippedConfigsLoad): an exec costs what a small config costs, and the engine minimizes a new
// input within moments instead of spending its minimization time on kilobytes of YAML.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"resources: [{name: pods, indexes: [label]}]",
		"resources: [{name: x}]\nindexes: [{name: i, cel: 'object', resources: [x]}]",
		"resources: [{name: pods, mode: metadata, namespace: a, labelSelector: 'app=web'}]\nserver: {listen: '127.0.0.1:8080'}",
		"resources: [{name: pods}]\nkubeconfig: {paths: [/k], include: ['prod-*'], exclude: ['*-dev']}",
		"resources: [{name: pods}]\nserver: {auth: {mode: delegated}}\nmanagement: {kubeconfig: /k}",
		"resources: [{name: pods}]\nsharding: {enabled: true, advertiseURL: 'https://a:8443', peerCertFile: c, peerKeyFile: k, peerCAFile: ca}",
		"resources: [{name: pods, indexes: [{name: n, jsonPath: '{.spec.nodeName}'}]}]\nmemoryLimit: 3Gi\nsyncGCPercent: -1",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config fails validation: %v", err)
		}
		if _, err := c.ResourceSpecs(); err != nil {
			t.Fatalf("accepted config does not build: %v", err)
		}
	})
}

// TestManagementFields: the management, sources and auth-mode fields are checked, each error
// naming its field.
func TestManagementFields(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"resources: [{name: pods}]\nserver: {auth: {mode: delegated}}\n", ""},
		{"resources: [{name: pods}]\nsources: {secrets: {namespace: fleet, include: ['prod-*']}}\nmanagement: {kubeconfig: /k, context: m}\n", ""},
		{"resources: [{name: pods}]\nserver: {auth: {mode: oidc}}\n", `server.auth.mode: "oidc" is not token or delegated`},
		{"resources: [{name: pods}]\nserver: {auth: {}}\n", "server.auth.tokenFile: required in mode token"},
		{"resources: [{name: pods}]\nserver: {auth: {mode: delegated, tokenFile: /t}}\n", "server.auth.tokenFile: not used in mode delegated"},
		{"resources: [{name: pods}]\nserver: {tls: {certFile: a, keyFile: b, clientCAFile: c}, auth: {tokenFile: /t}}\n", "server.tls.clientCAFile: needs server.auth.mode: delegated"},
		{"resources: [{name: pods}]\nsources: {secrets: {}}\n", "sources.secrets.namespace: required"},
		{"resources: [{name: pods}]\nclusters: {clusterProfiles: {namespace: inv, providerFile: /p.json, labelSelector: 'env=prod'}}\n", ""},
		{"resources: [{name: pods}]\nclusters: {clusterProfiles: {providerFile: /p.json}}\n", "clusters.clusterProfiles.namespace: required"},
		{"resources: [{name: pods}]\nclusters: {clusterProfiles: {namespace: inv}}\n", "clusters.clusterProfiles.providerFile: required"},
		{"resources: [{name: pods}]\nclusters: {clusterProfiles: {namespace: inv, providerFile: /p, labelSelector: 'a in'}}\n", "clusters.clusterProfiles.labelSelector: "},
		{"resources: [{name: pods}]\nclusters: {clusterProfiles: {namespace: inv, providerFile: /p, context: c}}\n", "clusters.clusterProfiles.context: needs clusters.clusterProfiles.kubeconfig"},
		{"resources: [{name: pods}]\nclusters: {clusterProfile: {}}\n", `unknown field "clusterProfile"`},
		{"resources: [{name: pods}]\nsources: {secrets: {namespace: f, exclude: ['[']}}\n", "sources.secrets.exclude[0]: bad glob"},
		{"resources: [{name: pods}]\nmanagement: {context: m}\n", "management.context: needs management.kubeconfig"},
		{"resources: [{name: pods}]\nmemoryLimit: 3Gi\n", ""},
		{"resources: [{name: pods}]\nserver: {listen: '0.0.0.0:8443', auth: {mode: delegated}}\n", "server.tls: required with server.auth.mode delegated beyond loopback"},
		{"resources: [{name: pods}]\nmemoryLimit: lots\n", `memoryLimit: "lots": want a positive quantity`},
		{"resources: [{name: pods}]\nsyncGCPercent: 800\n", ""},
		{"resources: [{name: pods}]\nsyncGCPercent: -1\n", ""},
		{"resources: [{name: pods}]\nsyncGCPercent: -2\n", `syncGCPercent: -2: want -1`},
		{"resources: [{name: pods}]\ngcPercent: 50\n", ""},
		{"resources: [{name: pods}]\ngcPercent: -1\n", `gcPercent: -1: want 0`},
		{"resources: [{name: pods}]\ngcPercent: 10001\n", `gcPercent: 10001: want 0`},
		{"resources: [{name: pods}]\nsharding: {enabled: true, advertiseURL: 'http://127.0.0.1:1', takeoverGCPercent: 0}\n", ""},
		{"resources: [{name: pods}]\nsharding: {enabled: true, advertiseURL: 'http://127.0.0.1:1', takeoverGCPercent: 10001}\n", `sharding.takeoverGCPercent: 10001: want -1`},
		{"resources: [{name: pods}]\nsources: {secret: {}}\n", `unknown field "secret"`},
	} {
		_, err := Parse([]byte(tc.yaml))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.yaml, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: got %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

func TestTakeoverGC(t *testing.T) {
	var c Config
	if got := c.TakeoverGC(); got != DefaultSyncGCPercent {
		t.Errorf("no sharding: TakeoverGC() = %d, want the default %d", got, DefaultSyncGCPercent)
	}
	c.Sharding = &Sharding{}
	if got := c.TakeoverGC(); got != DefaultSyncGCPercent {
		t.Errorf("unset: TakeoverGC() = %d, want the default %d", got, DefaultSyncGCPercent)
	}
	zero := 0
	c.Sharding.TakeoverGCPercent = &zero
	if got := c.TakeoverGC(); got != 0 {
		t.Errorf("set to 0: TakeoverGC() = %d, want 0 (leave the collector alone)", got)
	}
}
