package clusterset

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestDisableCompression: a cluster's requests ask for gzip unless Options.DisableCompression
// or the cluster's own kubeconfig (rest.Config.DisableCompression) turns it off, as kubectl's
// --disable-compression does.
func TestDisableCompression(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	// TLS, as API servers are: client-go gives a config without TLS options Go's default
	// transport, which asks for gzip whatever the config says.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		asked = append(asked, req.Header.Get("Accept-Encoding"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37"}`))
	}))
	defer srv.Close()
	for _, c := range []struct {
		name               string
		option, kubeconfig bool
		gzip               bool
	}{
		{"default", false, false, true},
		{"Options.DisableCompression", true, false, false},
		{"the kubeconfig's disable-compression", false, true, false},
	} {
		r := &runner{reg: &Registry{opts: Options{DisableCompression: c.option, UserAgent: "test"}},
			cfg: ClusterConfig{Name: "a", Config: &rest.Config{Host: srv.URL, DisableCompression: c.kubeconfig, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}}}
		cs, err := kubernetes.NewForConfig(r.restConfig())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.Discovery().RESTClient().Get().AbsPath("/version").DoRaw(context.Background()); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		mu.Lock()
		got := asked[len(asked)-1]
		mu.Unlock()
		if (got == "gzip") != c.gzip {
			t.Errorf("%s: Accept-Encoding %q, want gzip: %v", c.name, got, c.gzip)
		}
	}
}
