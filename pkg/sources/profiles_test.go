package sources

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/multicache/multicache/pkg/clusterset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const testProviders = `{"providers": [
  {"name": "tokens", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/tokens", "args": ["--a"],
    "env": [{"name": "KEEP", "value": "provider"}], "provideClusterInfo": true},
   "profileSourcedCLIArgsPolicy": "Append", "profileSourcedEnvVarsPolicy": "AppendIfNotExists"},
  {"name": "other", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "/bin/other"}}
]}`

// profile is a ClusterProfile as a cluster manager writes it: health, then access providers.
func profile(name, uid, health string, access ...map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
		"metadata": map[string]any{"name": name, "namespace": "inventory", "uid": uid},
		"spec":     map[string]any{"clusterManager": map[string]any{"name": "test"}},
	}}
	status := map[string]any{}
	if health != "" {
		status["conditions"] = []any{map[string]any{"type": ControlPlaneHealthy, "status": health, "reason": "Probe",
			"message": "probed", "lastTransitionTime": "2026-01-01T00:00:00Z"}}
	}
	var ap []any
	for _, a := range access {
		ap = append(ap, a)
	}
	status["accessProviders"] = ap
	u.Object["status"] = status
	return u
}

func access(provider, server string, extensions ...any) map[string]any {
	c := map[string]any{"server": server, "certificate-authority-data": "Q0E="} // "CA"
	if len(extensions) > 0 {
		c["extensions"] = extensions
	}
	return map[string]any{"name": provider, "cluster": c}
}

func ext(name string, v any) map[string]any { return map[string]any{"name": name, "extension": v} }

func TestClusterProfilesSource(t *testing.T) {
	dir := t.TempDir()
	pfPath := filepath.Join(dir, "providers.json")
	if err := os.WriteFile(pfPath, []byte(testProviders), 0o600); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{ClusterProfileGVR: "ClusterProfileList"},
		profile("alpha", "u1", "True", access("other", "https://other:6443"),
			access("tokens", "https://alpha:6443",
				ext(ExecExtension, map[string]any{"cluster": "alpha"}),
				ext(ArgsExtension, []any{"--b"}),
				ext(EnvExtension, map[string]any{"KEEP": "profile", "ADD": "profile"}))),
		profile("beta", "u2", "False"),
		profile("gamma", "u3", "True", access("unknown", "https://gamma:6443")),
		profile("delta", "u4", "True", access("tokens", "https://delta:6443")),
	)
	src, err := NewClusterProfiles(ClusterProfilesOptions{Client: client, Namespace: "inventory", ProviderFile: pfPath, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := src.Start(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	changes := src.Changes(ctx)
	load := func() map[string]clusterset.ClusterConfig {
		t.Helper()
		cfgs, err := src.Load()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]clusterset.ClusterConfig{}
		for _, c := range cfgs {
			out[c.Name] = c
		}
		return out
	}
	got := load()
	// beta, unhealthy, was there at the first load: it is taken as started, clusterset.Degraded.
	if len(got) != 4 || got["beta"].Waiting != "" || !strings.Contains(got["beta"].Health, "ControlPlaneHealthy is False (Probe: probed)") {
		t.Fatalf("clusters %v, beta %+v: want alpha, beta, delta and gamma, beta started and unhealthy", keysOf(got), got["beta"])
	}

	// alpha: the provider file's first provider the profile offers, with the profile's
	// server and CA, its exec extension as the plugin's config, arguments and variables
	// added as the provider's policies say, never interactive.
	a := got["alpha"]
	if a.Err != nil || a.Config == nil {
		t.Fatalf("alpha: %v", a.Err)
	}
	if a.Config.Host != "https://alpha:6443" || string(a.Config.CAData) != "CA" {
		t.Fatalf("alpha reached at %q with CA %q", a.Config.Host, a.Config.CAData)
	}
	ex := a.Config.ExecProvider
	if ex.Command != "/bin/tokens" || !reflect.DeepEqual(ex.Args, []string{"--a", "--b"}) || ex.InteractiveMode != clientcmdapi.NeverExecInteractiveMode || !ex.ProvideClusterInfo {
		t.Fatalf("alpha's plugin: %+v", ex)
	}
	wantEnv := []clientcmdapi.ExecEnvVar{{Name: "ADD", Value: "profile"}, {Name: "KEEP", Value: "provider"}}
	if !reflect.DeepEqual(ex.Env, wantEnv) {
		t.Fatalf("alpha's plugin environment %v, want %v (the provider's KEEP wins under AppendIfNotExists)", ex.Env, wantEnv)
	}
	if ex.Config == nil {
		t.Fatal("alpha's plugin has no cluster config: the exec extension was lost")
	}
	if b, _ := json.Marshal(ex.Config); !strings.Contains(string(b), `"cluster":"alpha"`) {
		t.Fatalf("alpha's plugin config %s", b)
	}
	if !strings.Contains(a.Origin, `ClusterProfile inventory/alpha`) || !strings.Contains(a.Origin, `"tokens"`) {
		t.Fatalf("alpha's origin %q", a.Origin)
	}
	// gamma: a provider the file does not name is gamma's error, with the name in it.
	if g := got["gamma"]; g.Err == nil || g.Config != nil || !strings.Contains(g.Err.Error(), `"unknown"`) {
		t.Fatalf("gamma: config %v, error %v", g.Config, g.Err)
	}

	update := func(u *unstructured.Unstructured) {
		t.Helper()
		if _, err := client.Resource(ClusterProfileGVR).Namespace("inventory").Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changes:
		case <-time.After(10 * time.Second):
			t.Fatal("no change signalled")
		}
	}
	waitLoad := func(cond func(map[string]clusterset.ClusterConfig) bool) map[string]clusterset.ClusterConfig {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := load()
			if cond(got) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("not reached; last load: %v", keysOf(got))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// beta is deleted and created again, unhealthy (a new uid): a profile that appears while
	// the source runs waits for its control plane to be healthy.
	if err := client.Resource(ClusterProfileGVR).Namespace("inventory").Delete(ctx, "beta", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLoad(func(m map[string]clusterset.ClusterConfig) bool { _, ok := m["beta"]; return !ok })
	if _, err := client.Resource(ClusterProfileGVR).Namespace("inventory").Create(ctx, profile("beta", "u5", "False", access("tokens", "https://beta:6443")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = waitLoad(func(m map[string]clusterset.ClusterConfig) bool { return m["beta"].Waiting != "" })
	if w := got["beta"].Waiting; !strings.Contains(w, "ClusterProfile inventory/beta") || !strings.Contains(w, "ControlPlaneHealthy is False (Probe: probed)") || got["beta"].Health != "" {
		t.Fatalf("beta, created again unhealthy: waiting %q, health %q", w, got["beta"].Health)
	}
	// beta turns healthy: it starts.
	update(profile("beta", "u5", "True", access("tokens", "https://beta:6443")))
	got = waitLoad(func(m map[string]clusterset.ClusterConfig) bool { return m["beta"].Waiting == "" })
	betaFP := got["beta"].Fingerprint
	// beta turns unhealthy: it stays, with the condition as its health, and its fingerprint
	// (so its stacks) unchanged.
	update(profile("beta", "u5", "False", access("tokens", "https://beta:6443")))
	got = waitLoad(func(m map[string]clusterset.ClusterConfig) bool { return m["beta"].Health != "" })
	if b := got["beta"]; b.Fingerprint != betaFP || b.Waiting != "" || !strings.Contains(b.Health, "ControlPlaneHealthy is False (Probe: probed)") {
		t.Fatalf("beta unhealthy: fingerprint %s (was %s), health %q, waiting %q", b.Fingerprint, betaFP, b.Health, b.Waiting)
	}
	// A changed server changes the fingerprint of that cluster only.
	deltaFP := got["delta"].Fingerprint
	update(profile("beta", "u5", "True", access("tokens", "https://beta-moved:6443")))
	got = waitLoad(func(m map[string]clusterset.ClusterConfig) bool { return m["beta"].Fingerprint != betaFP })
	if got["beta"].Health != "" || got["delta"].Fingerprint != deltaFP || got["beta"].Config.Host != "https://beta-moved:6443" {
		t.Fatalf("after beta's server moved: beta %+v, delta's fingerprint %s (was %s)", got["beta"], got["delta"].Fingerprint, deltaFP)
	}
	// So do a changed CA, proxy or extension; a changed condition message does not.
	movedFP := got["beta"].Fingerprint
	for _, change := range []struct {
		what string
		p    *unstructured.Unstructured
	}{
		{"CA", func() *unstructured.Unstructured {
			a := access("tokens", "https://beta-moved:6443")
			a["cluster"].(map[string]any)["certificate-authority-data"] = "Q0Ey" // "CA2"
			return profile("beta", "u5", "True", a)
		}()},
		{"proxy", func() *unstructured.Unstructured {
			a := access("tokens", "https://beta-moved:6443")
			a["cluster"].(map[string]any)["proxy-url"] = "http://proxy:3128"
			return profile("beta", "u5", "True", a)
		}()},
		{"extension", profile("beta", "u5", "True", access("tokens", "https://beta-moved:6443", ext(ExecExtension, map[string]any{"cluster": "other"})))},
	} {
		update(change.p)
		got = waitLoad(func(m map[string]clusterset.ClusterConfig) bool { return m["beta"].Fingerprint != movedFP })
		if got["delta"].Fingerprint != deltaFP {
			t.Fatalf("beta's %s changed delta's fingerprint", change.what)
		}
		movedFP = got["beta"].Fingerprint
	}
	same := profile("beta", "u5", "True", access("tokens", "https://beta-moved:6443", ext(ExecExtension, map[string]any{"cluster": "other"})))
	same.Object["status"].(map[string]any)["conditions"].([]any)[0].(map[string]any)["message"] = "probed again"
	update(same)
	if fp := load()["beta"].Fingerprint; fp != movedFP {
		t.Fatalf("a new condition message changed beta's fingerprint")
	}

	// The provider file changes: a change is signalled, and delta, whose provider's plugin
	// changed, gets a new fingerprint.
	if err := os.WriteFile(pfPath, []byte(strings.Replace(testProviders, "/bin/tokens", "/bin/tokens2", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
	case <-time.After(10 * time.Second):
		t.Fatal("provider file change not signalled")
	}
	if d := load()["delta"]; d.Fingerprint == deltaFP || d.Config.ExecProvider.Command != "/bin/tokens2" {
		t.Fatalf("delta after the provider changed: fingerprint %s, command %q", d.Fingerprint, d.Config.ExecProvider.Command)
	}
	// A provider file broken mid-edit fails the load, so that the clusterset.Registry keeps what runs.
	if err := os.WriteFile(pfPath, []byte(`{"providers": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfgs, err := src.Load(); err == nil || cfgs != nil {
		t.Fatalf("load with a broken provider file: %d clusters, error %v", len(cfgs), err)
	}
}

func keysOf(m map[string]clusterset.ClusterConfig) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestProviderFileErrorsNameTheField(t *testing.T) {
	for in, want := range map[string]string{
		`{"providers": []}`: "providers: none listed",
		`{"providers": [{"execConfig": {"command": "x", "apiVersion": "client.authentication.k8s.io/v1"}}]}`: "providers[0].name: required",
		`{"providers": [{"name": "a"}]}`: "providers[0].execConfig: required",
		`{"providers": [{"name": "a", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1"}}]}`: "providers[0].execConfig.command: required",
		`{"providers": [{"name": "a", "execConfig": {"command": "x"}}]}`:                                  "providers[0].execConfig.apiVersion",
		`{"providers": [{"name": "a", "execConfig": {"command": "x", "apiVersion": "client.authentication.k8s.io/v1"}},
		  {"name": "a", "execConfig": {"command": "x", "apiVersion": "client.authentication.k8s.io/v1"}}]}`: `providers[1].name: "a" already named by providers[0]`,
		`{"providers": [{"name": "a", "execConfig": {"command": "x", "apiVersion": "client.authentication.k8s.io/v1"}, "profileSourcedCLIArgsPolicy": "Prepend"}]}`: "providers[0].profileSourcedCLIArgsPolicy",
		`[1, 2]`: "not the provider file's JSON",
	} {
		_, err := ParseProviderFile([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want it to say %q", in, err, want)
		}
	}
}

func TestProfileAccessRefusesWhatReachesOutside(t *testing.T) {
	pf, err := ParseProviderFile([]byte(testProviders))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field   string
		cluster map[string]any
	}{
		{"certificate-authority", map[string]any{"server": "https://x:6443", "certificate-authority": "/etc/passwd"}},
		{"insecure-skip-tls-verify", map[string]any{"server": "https://x:6443", "insecure-skip-tls-verify": true}},
		{"server", map[string]any{"server": "ftp://x"}},
		{"server", map[string]any{"server": "http://x:6443"}},
		{"proxy-url", map[string]any{"server": "https://x:6443", "proxy-url": "::"}},
	} {
		name, c := tc.field, tc.cluster
		var p clusterProfile
		b, _ := json.Marshal(map[string]any{"status": map[string]any{"accessProviders": []any{map[string]any{"name": "tokens", "cluster": c}}}})
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		prov, a, err := pf.access(&p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := restConfig(prov, a); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v, want one naming the field", name, err)
		}
	}
	// Profile-sourced variables: Replace lets the profile's win over the provider's, Ignore
	// (the default) adds none, and no policy lets a profile set the loader's, the program
	// search path, proxies or client-go's own variable.
	envFile := `{"providers": [
	  {"name": "replace", "profileSourcedEnvVarsPolicy": "Replace", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/p", "env": [{"name": "A", "value": "provider"}]}},
	  {"name": "ignore", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/p", "env": [{"name": "A", "value": "provider"}]}}]}`
	pf2, err := ParseProviderFile([]byte(envFile))
	if err != nil {
		t.Fatal(err)
	}
	envOf := func(provider string, vars map[string]any) ([]clientcmdapi.ExecEnvVar, error) {
		var p clusterProfile
		b, _ := json.Marshal(map[string]any{"status": map[string]any{"accessProviders": []any{access(provider, "https://x:6443", ext(EnvExtension, vars))}}})
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		prov, a, err := pf2.access(&p)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := restConfig(prov, a)
		if err != nil {
			return nil, err
		}
		return cfg.ExecProvider.Env, nil
	}
	if env, err := envOf("replace", map[string]any{"A": "profile", "B": "profile"}); err != nil || !reflect.DeepEqual(env, []clientcmdapi.ExecEnvVar{{Name: "A", Value: "profile"}, {Name: "B", Value: "profile"}}) {
		t.Errorf("Replace: %v, %v", env, err)
	}
	if env, err := envOf("ignore", map[string]any{"A": "profile", "B": "profile"}); err != nil || !reflect.DeepEqual(env, []clientcmdapi.ExecEnvVar{{Name: "A", Value: "provider"}}) {
		t.Errorf("Ignore: %v, %v", env, err)
	}
	for _, name := range []string{"LD_PRELOAD", "PATH", "https_proxy", "KUBERNETES_EXEC_INFO"} {
		if _, err := envOf("replace", map[string]any{name: "x"}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("a profile setting %s: error %v, want one naming it", name, err)
		}
	}
	// A profile's health without the condition: it waits.
	if h := profileHealth(&clusterProfile{}); !strings.Contains(h, "not reported") {
		t.Errorf("health without the condition: %q", h)
	}
}
