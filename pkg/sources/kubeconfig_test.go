package sources

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/multicache/multicache/pkg/clusterset"
)

func writeConfig(t *testing.T, path string, contexts map[string]string) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	for ctx, server := range contexts {
		cfg.Clusters[ctx] = &clientcmdapi.Cluster{Server: server}
		cfg.AuthInfos[ctx] = &clientcmdapi.AuthInfo{Token: "secret-" + ctx}
		cfg.Contexts[ctx] = &clientcmdapi.Context{Cluster: ctx, AuthInfo: ctx}
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}

func names(cs []clusterset.ClusterConfig) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return strings.Join(out, ",")
}

func TestKubeconfigSelectRenameValidate(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	writeConfig(t, a, map[string]string{"prod-eu": "https://1.example:6443", "prod-us": "https://2.example:6443", "dev": "https://3.example:6443"})
	writeConfig(t, b, map[string]string{"arn:aws:eks:us-east-1:1:cluster/x": "https://4.example:6443", "staging": "https://5.example:6443"})

	src, err := NewKubeconfig(KubeconfigOptions{Paths: []string{a, b}, Exclude: []string{"prod-us"}, Rename: map[string]string{"dev": "development"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := src.Load()
	if got := names(got); got != "development,prod-eu,staging" {
		t.Errorf("clusters = %s", got)
	}
	if err == nil || !strings.Contains(err.Error(), `context "arn:aws:eks:us-east-1:1:cluster/x"`) || !strings.Contains(err.Error(), "rename") {
		t.Errorf("invalid context name: error %v", err)
	}
	for _, c := range got {
		if strings.Contains(c.Fingerprint, "secret") || c.Fingerprint == "" {
			t.Errorf("fingerprint %q", c.Fingerprint)
		}
	}

	src, _ = NewKubeconfig(KubeconfigOptions{Paths: []string{a}, Include: []string{"prod-*"}, Rename: map[string]string{"prod-us": "prod-eu"}})
	got, err = src.Load()
	if names(got) != "prod-eu" || err == nil || !strings.Contains(err.Error(), "already used") {
		t.Errorf("duplicate name: %s, %v", names(got), err)
	}

	if _, err := NewKubeconfig(KubeconfigOptions{Include: []string{"[x"}}); err == nil || !strings.Contains(err.Error(), "include") {
		t.Errorf("bad glob: %v", err)
	}
	src, _ = NewKubeconfig(KubeconfigOptions{Paths: []string{filepath.Join(dir, "missing")}})
	if _, err := src.Load(); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing file: %v", err)
	}
}

func TestKubeconfigFingerprintAndChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	writeConfig(t, path, map[string]string{"one": "https://1.example:6443", "two": "https://2.example:6443"})
	src, _ := NewKubeconfig(KubeconfigOptions{Paths: []string{path}, PollInterval: 10 * time.Millisecond})
	before, _ := src.Load()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := src.Changes(ctx)

	cfg, _ := clientcmd.LoadFromFile(path)
	cfg.AuthInfos["two"].Token = "rotated"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no change notification")
	}
	after, _ := src.Load()
	if before[0].Fingerprint != after[0].Fingerprint {
		t.Error("fingerprint of an unchanged context changed")
	}
	if before[1].Fingerprint == after[1].Fingerprint {
		t.Error("fingerprint did not change with the token")
	}
}
