package sources

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/multicache/multicache/pkg/clusterset"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func kubeconfigFor(server, extraUser string) []byte {
	return []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: ` + server + `
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: t0ken` + extraUser + `
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
`)
}

func secret(name string, labels map[string]string, typ corev1.SecretType, key string, data []byte, age time.Duration) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "fleet", Labels: labels, CreationTimestamp: metav1.NewTime(time.Unix(1e9, 0).Add(-age))},
		Type:       typ, Data: map[string][]byte{key: data},
	}
}

func TestSecretsSource(t *testing.T) {
	cs := fake.NewClientset(
		secret("a", map[string]string{ClusterLabel: "alpha"}, corev1.SecretTypeOpaque, ClusterKubeconfigKey, kubeconfigFor("https://alpha:6443", ""), 2*time.Hour),
		// A later Secret claiming the same cluster loses.
		secret("a2", map[string]string{ClusterLabel: "alpha"}, corev1.SecretTypeOpaque, ClusterKubeconfigKey, kubeconfigFor("https://other:6443", ""), time.Hour),
		secret("broken", map[string]string{ClusterLabel: "beta"}, corev1.SecretTypeOpaque, ClusterKubeconfigKey, []byte("{not yaml"), 0),
		secret("execs", map[string]string{ClusterLabel: "gamma"}, corev1.SecretTypeOpaque, ClusterKubeconfigKey,
			kubeconfigFor("https://gamma:6443", "\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}"), 0),
		secret("bad-name", map[string]string{ClusterLabel: ""}, corev1.SecretTypeOpaque, ClusterKubeconfigKey, kubeconfigFor("https://x:6443", ""), 0),
		secret("w1-kubeconfig", map[string]string{CAPIClusterLabel: "w1"}, CAPISecretType, CAPIKubeconfigKey, kubeconfigFor("https://w1:6443", ""), 0),
		// Cluster API's other Secrets of w1 are not clusters.
		secret("w1-ca", map[string]string{CAPIClusterLabel: "w1"}, CAPISecretType, "tls.crt", []byte("pem"), 0),
		secret("skipped", map[string]string{ClusterLabel: "skip-me"}, corev1.SecretTypeOpaque, ClusterKubeconfigKey, kubeconfigFor("https://s:6443", ""), 0),
	)
	src, err := NewSecrets(SecretsOptions{Client: cs, Namespace: "fleet", Exclude: []string{"skip-*"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := src.Start(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	cfgs, err := src.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	got := map[string]clusterset.ClusterConfig{}
	var names []string
	for _, c := range cfgs {
		got[c.Name] = c
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "alpha,beta,gamma,w1" {
		t.Fatalf("clusters %v, want alpha,beta,gamma,w1", names)
	}
	if c := got["alpha"]; c.Err != nil || c.Config.Host != "https://alpha:6443" || c.Origin != "Secret fleet/a" {
		t.Errorf("alpha: host %v origin %q err %v: want the older Secret a", c.Config, c.Origin, c.Err)
	}
	if c := got["w1"]; c.Err != nil || c.Config.Host != "https://w1:6443" {
		t.Errorf("w1 (Cluster API): %+v", c)
	}
	if c := got["beta"]; c.Err == nil || c.Config != nil || !strings.Contains(c.Err.Error(), `Secret fleet/broken: data key "kubeconfig"`) {
		t.Errorf("beta: want an error naming the Secret and key, got %v", c.Err)
	}
	if c := got["gamma"]; c.Err == nil || !strings.Contains(c.Err.Error(), "exec credential plugins are not allowed") {
		t.Errorf("gamma: want exec refused, got %v", c.Err)
	}

	if ca, err := src.capi.Secrets("fleet").Get("w1-ca"); err != nil || len(ca.Data) != 0 {
		t.Errorf("Cluster API's CA Secret is held with its data (%v): %v", err, ca)
	}

	// A rotation changes the fingerprint; a deletion removes the cluster; both notify.
	drain := func() {
		select {
		case <-src.Changes(ctx):
		default:
		}
	}
	drain()
	sec := secret("w1-kubeconfig", map[string]string{CAPIClusterLabel: "w1"}, CAPISecretType, CAPIKubeconfigKey, kubeconfigFor("https://w1-new:6443", ""), 0)
	if _, err := cs.CoreV1().Secrets("fleet").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Secrets("fleet").Delete(ctx, "broken", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-src.Changes(ctx):
		case <-deadline:
			t.Fatal("no change after an update and a delete")
		}
		cfgs, _ = src.Load()
		if len(cfgs) == 3 && cfgs[2].Config.Host == "https://w1-new:6443" {
			if cfgs[2].Fingerprint == got["w1"].Fingerprint {
				t.Error("rotated Secret kept its fingerprint")
			}
			return
		}
	}
}

// erringSource yields its clusters with err.
type erringSource struct {
	cfgs []clusterset.ClusterConfig
	err  error
}

func (e *erringSource) Load() ([]clusterset.ClusterConfig, error) { return e.cfgs, e.err }
func (e *erringSource) Changes(context.Context) <-chan struct{}   { return nil }

func TestMultiSource(t *testing.T) {
	a := &erringSource{cfgs: []clusterset.ClusterConfig{{Name: "x", Origin: "A"}, {Name: "y", Origin: "A"}, {Name: "w", Origin: "A"}}}
	b := &erringSource{cfgs: []clusterset.ClusterConfig{{Name: "y", Origin: "B"}, {Name: "z", Origin: "B"}, {Name: "gone", Origin: "B"}}}
	m := NewMulti(a, b)
	cfgs, err := m.Load()
	var complete *clusterset.CompleteError
	if !errors.As(err, &complete) || !strings.Contains(err.Error(), `B: cluster name "y" already used by A`) {
		t.Errorf("want the clash named in a clusterset.CompleteError, got %v", err)
	}
	if names(cfgs) != "gone,w,x,y,z" || cfgs[3].Origin != "A" {
		t.Errorf("got %+v, want gone, w, x, y from A, z", cfgs)
	}
	// A's load turns partial (w unreadable): w is kept as it was, and the cluster removed from
	// B still leaves; the load as a whole is complete.
	a.cfgs, a.err = a.cfgs[:2], errors.New("context w: exec plugin missing")
	b.cfgs = b.cfgs[:2]
	cfgs, err = m.Load()
	if !errors.As(err, &complete) || names(cfgs) != "w,x,y,z" {
		t.Errorf("after a partial load of A and a removal from B: %s, %v; want w,x,y,z and a clusterset.CompleteError", names(cfgs), err)
	}
}
