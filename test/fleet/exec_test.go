package fleet_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/multicache/multicache/test/fleet"
)

// TestExecToken checks that a cluster's API server accepts its exec token, directly and as handed
// out by the exec credential plugin, and still does after a restart.
func TestExecToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	plugin := fleet.BuildExecPluginT(t)
	f := fleet.StartT(t, fleet.Options{Clusters: 1})
	c := f.Clusters[0]

	token, err := c.ExecToken()
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{c.ExecTokenFile(), filepath.Join(c.Dir, "exec-tokens.csv")} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", path, st.Mode().Perm())
		}
	}
	tokenConfig := func(token string) *rest.Config {
		return &rest.Config{Host: c.URL(), BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: c.CACertFile()}, Timeout: 30 * time.Second}
	}
	whoami := func(cfg *rest.Config) {
		t.Helper()
		cs := kubernetes.NewForConfigOrDie(cfg)
		if _, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("list namespaces: %v", err)
		}
		r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("self subject review: %v", err)
		}
		if u := r.Status.UserInfo; u.Username != fleet.ExecUser || u.UID != fleet.ExecUser {
			t.Errorf("authenticated as %+v, want user and uid %s", u, fleet.ExecUser)
		}
	}

	t.Run("static token", func(t *testing.T) {
		whoami(tokenConfig(token))
		other := []byte(token)
		other[0] ^= 1
		_, err := kubernetes.NewForConfigOrDie(tokenConfig(string(other))).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("another token: want 401, got %v", err)
		}
	})

	t.Run("exec plugin", func(t *testing.T) {
		log := filepath.Join(t.TempDir(), "calls.log")
		whoami(&rest.Config{
			Host:            c.URL(),
			TLSClientConfig: rest.TLSClientConfig{CAFile: c.CACertFile()},
			Timeout:         30 * time.Second,
			ExecProvider: &clientcmdapi.ExecConfig{
				APIVersion:         "client.authentication.k8s.io/v1",
				Command:            plugin,
				Args:               []string{"--fleet-dir", f.Dir, "--log", log},
				ProvideClusterInfo: true,
				InteractiveMode:    clientcmdapi.NeverExecInteractiveMode,
				Config:             &runtime.Unknown{Raw: []byte(`{"cluster":"` + c.Name + `"}`), ContentType: runtime.ContentTypeJSON},
			},
		})
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		// One call: the token's hour-long expiry lets client-go reuse it for both requests.
		if want := "cluster=" + c.Name + " server=" + c.URL() + "\n"; string(b) != want {
			t.Errorf("plugin calls:\n%s\nwant:\n%s", b, want)
		}
	})

	t.Run("token survives an API server restart", func(t *testing.T) {
		csv := filepath.Join(c.Dir, "exec-tokens.csv")
		before, err := os.ReadFile(csv)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		if err := c.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		after, err := os.ReadFile(csv)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := c.ExecToken(); err != nil || again != token || !bytes.Equal(before, after) {
			t.Fatalf("after restart: token changed (%v) or token auth file changed", err)
		}
		whoami(tokenConfig(token))
	})
}
