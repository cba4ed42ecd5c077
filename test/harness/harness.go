package harness

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/verify"
	"github.com/multicache/multicache/test/fleet"
)

// Common resources.
var (
	Pods       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	ConfigMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	Widgets    = fleet.WidgetGVR
)

// Options start an Env.
type Options struct {
	// Clusters in the fleet. Default 3.
	Clusters int
	// Seed, if it has namespaces, is written into every cluster before Start returns.
	Seed fleet.Spec
	// Timeout bounds the whole test (Env.Ctx). Default 15 minutes.
	Timeout time.Duration
	// APIServerArgs are extra kube-apiserver flags.
	APIServerArgs []string
	// AuditReads has the API servers log list and watch requests (fleet.Cluster.ReadsBy).
	AuditReads bool
}

// Env is a started, seeded fleet and a context for the test.
type Env struct {
	T      testing.TB
	Ctx    context.Context
	Fleet  *fleet.Fleet
	Loader *fleet.Loader
}

// Start starts a fleet that the test's cleanup stops, and seeds it.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	if opts.Clusters == 0 {
		opts.Clusters = 3
	}
	if opts.Timeout == 0 {
		opts.Timeout = 15 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	t.Cleanup(cancel)
	f := fleet.StartT(t, fleet.Options{Clusters: opts.Clusters, APIServerArgs: opts.APIServerArgs, AuditReads: opts.AuditReads})
	loader, err := fleet.NewLoader(f)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Seed.Namespaces > 0 {
		if _, err := loader.Seed(ctx, opts.Seed); err != nil {
			t.Fatal(err)
		}
	}
	return &Env{T: t, Ctx: ctx, Fleet: f, Loader: loader}
}

// Registry builds a Registry with opts, runs it until the test ends, and waits for it to sync.
func (e *Env) Registry(opts clusterset.Options) *clusterset.Registry {
	e.T.Helper()
	reg, err := clusterset.New(opts)
	if err != nil {
		e.T.Fatal(err)
	}
	e.Run(reg)
	if missing := reg.WaitForSync(e.Ctx, 2*time.Minute); missing != nil {
		e.T.Fatalf("not synced: %v", missing)
	}
	return reg
}

// Run starts reg and stops it, waiting for it, when the test ends. It does not wait for sync.
func (e *Env) Run(reg *clusterset.Registry) {
	ctx, stop := context.WithCancel(e.Ctx)
	done := make(chan struct{})
	go func() { _ = reg.Start(ctx); close(done) }()
	e.T.Cleanup(func() { stop(); <-done })
}

// Static is a cluster source of the fleet's clusters, with the revocable token identity.
func (e *Env) Static() clusterset.Static {
	var src clusterset.Static
	for _, c := range e.Fleet.Clusters {
		src = append(src, clusterset.ClusterConfig{Name: c.Name, Config: c.Config(), Fingerprint: "1"})
	}
	return src
}

// Servers maps each named cluster (every cluster when none) to its API server, with the admin
// identity: ground truth for verify.
func (e *Env) Servers(clusters ...string) map[string]*rest.Config {
	if len(clusters) == 0 {
		clusters = e.Fleet.Names()
	}
	out := map[string]*rest.Config{}
	for _, name := range clusters {
		c, err := e.Fleet.Cluster(name)
		if err != nil {
			e.T.Fatal(err)
		}
		out[name] = c.AdminConfig()
	}
	return out
}

// Converge waits up to within until agg equals what servers list of gvr (verify.Compare), and
// fails the test with the differences if it never does. It returns the last report.
func Converge(ctx context.Context, t testing.TB, agg *aggregate.Aggregate, gvr schema.GroupVersionResource, servers map[string]*rest.Config, within time.Duration) verify.Report {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		rep, err := verify.Compare(ctx, agg, gvr, "", servers)
		if err == nil && len(rep.Diverged) == 0 {
			return rep
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("%s: %v", gvr.Resource, err)
			}
			t.Fatalf("%s: cache diverged from the API servers: %s", gvr.Resource, rep.Summary())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// WaitFor polls f every 100 ms until it is true, and fails the test after within.
func WaitFor(t testing.TB, what string, within time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s", what, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// EnvInt is the positive integer in the environment variable name, or def.
func EnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
