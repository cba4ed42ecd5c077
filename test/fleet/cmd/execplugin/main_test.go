package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
)

// TestRun runs the plugin's logic against a fleet directory holding one cluster's token, as
// client-go would call it.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	const token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	if err := os.MkdirAll(filepath.Join(dir, "fleet-1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fleet-1", tokenFile), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	info := func(apiVersion, cluster string) string {
		return `{"apiVersion":"` + apiVersion + `","kind":"ExecCredential","spec":{"interactive":false,` + cluster + `}}`
	}
	const v1 = "client.authentication.k8s.io/v1"
	withConfig := func(config string) string {
		return `"cluster":{"server":"https://127.0.0.1:6443","certificate-authority-data":"Y2E=","config":` + config + `}`
	}
	args := []string{"--fleet-dir", dir}

	for _, tc := range []struct {
		name    string
		args    []string
		info    string
		wantErr string // substring of stderr; empty for success
	}{
		{name: "v1", args: args, info: info(v1, withConfig(`{"cluster":"fleet-1"}`))},
		{name: "v1beta1", args: args, info: info("client.authentication.k8s.io/v1beta1", withConfig(`{"cluster":"fleet-1"}`))},
		{name: "no exec info", args: args, wantErr: "KUBERNETES_EXEC_INFO is not set"},
		{name: "not JSON", args: args, info: "{", wantErr: "decode ExecCredential"},
		{name: "unknown apiVersion", args: args, info: info("client.authentication.k8s.io/v2", withConfig(`{"cluster":"fleet-1"}`)), wantErr: `apiVersion "client.authentication.k8s.io/v2"`},
		{name: "no spec.cluster", args: args, info: `{"apiVersion":"` + v1 + `","kind":"ExecCredential","spec":{}}`, wantErr: "no spec.cluster: the exec config must set provideClusterInfo: true"},
		{name: "no config", args: args, info: info(v1, `"cluster":{"server":"https://127.0.0.1:6443"}`), wantErr: "no spec.cluster.config"},
		{name: "config without cluster", args: args, info: info(v1, withConfig(`{"audience":"x"}`)), wantErr: `spec.cluster.config has no "cluster"`},
		{name: "config not an object", args: args, info: info(v1, withConfig(`"fleet-1"`)), wantErr: "spec.cluster.config: want"},
		{name: "cluster is a path", args: args, info: info(v1, withConfig(`{"cluster":"../fleet-1"}`)), wantErr: `cluster "../fleet-1" is not a cluster name`},
		{name: "unknown cluster", args: args, info: info(v1, withConfig(`{"cluster":"fleet-9"}`)), wantErr: `cluster "fleet-9": token of the fleet in ` + dir},
		{name: "no fleet dir", info: info(v1, withConfig(`{"cluster":"fleet-1"}`)), wantErr: "--fleet-dir is required"},
		{name: "fail", args: append([]string{"--fail", "plugin down for the test"}, args...), info: info(v1, withConfig(`{"cluster":"fleet-1"}`)), wantErr: "plugin down for the test"},
		{name: "stray argument", args: append([]string{"extra"}, args...), wantErr: "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			env := func(k string) string {
				if k == execInfoEnv {
					return tc.info
				}
				return ""
			}
			code := run(tc.args, env, &stdout, &stderr)
			if tc.wantErr != "" {
				if code != 1 || !strings.Contains(stderr.String(), tc.wantErr) || stdout.Len() != 0 {
					t.Fatalf("exit %d, stdout %q, stderr %q: want exit 1, nothing on stdout, stderr containing %q", code, stdout.String(), stderr.String(), tc.wantErr)
				}
				return
			}
			if code != 0 || stderr.Len() != 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			var cred clientauthv1.ExecCredential
			if err := json.Unmarshal(stdout.Bytes(), &cred); err != nil {
				t.Fatalf("stdout %q: %v", stdout.String(), err)
			}
			var in clientauthv1.ExecCredential
			_ = json.Unmarshal([]byte(tc.info), &in)
			if cred.APIVersion != in.APIVersion || cred.Kind != "ExecCredential" {
				t.Errorf("printed apiVersion %q kind %q, want %q ExecCredential", cred.APIVersion, cred.Kind, in.APIVersion)
			}
			if cred.Status == nil || cred.Status.Token != token {
				t.Fatalf("printed status %+v, want token %s", cred.Status, token)
			}
			if exp := cred.Status.ExpirationTimestamp; exp == nil || time.Until(exp.Time) < 50*time.Minute || time.Until(exp.Time) > tokenTTL {
				t.Errorf("expirationTimestamp %v, want about an hour ahead", exp)
			}
			if strings.Contains(stdout.String(), `"spec"`) {
				t.Errorf("stdout echoes the request's spec: %s", stdout.String())
			}
		})
	}
}

// TestRunLog checks that --log records every invocation, failed ones included, with the cluster
// and server the plugin was given.
func TestRunLog(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "calls.log")
	info := `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"cluster":{"server":"https://127.0.0.1:6443","config":{"cluster":"fleet-2"}}}}`
	env := func(string) string { return info }
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--fleet-dir", dir, "--log", log}, env, &stdout, &stderr); code != 1 {
		t.Fatalf("no token file: exit %d, want 1", code)
	}
	if code := run([]string{"--fail", "down", "--log", log}, env, &stdout, &stderr); code != 1 {
		t.Fatalf("--fail: exit %d, want 1", code)
	}
	if code := run([]string{"--fail", "down", "--log", log}, func(string) string { return "" }, &stdout, &stderr); code != 1 {
		t.Fatalf("--fail without exec info: exit %d, want 1", code)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	want := "cluster=fleet-2 server=https://127.0.0.1:6443\ncluster=fleet-2 server=https://127.0.0.1:6443\ncluster= server=\n"
	if string(b) != want {
		t.Errorf("log:\n%s\nwant:\n%s", b, want)
	}
}
