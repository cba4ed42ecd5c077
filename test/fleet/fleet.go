package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// LimitedUser is the user name of the RBAC-restricted identity in limited.kubeconfig.
const LimitedUser = "fleet-limited"

// Options configures Start. The zero value starts 3 clusters in a new temporary directory.
type Options struct {
	// Clusters is how many clusters to start. Default 3.
	Clusters int
	// Dir is the fleet's directory. It must not exist or be empty. Default: a new temp dir.
	// Stop removes it either way.
	Dir string
	// BinDir holds etcd and kube-apiserver (and kube-controller-manager if asked for).
	// Default: $MULTICACHE_BIN_DIR, else bin/ at the root of this module's checkout.
	BinDir string
	// NamePrefix names clusters PREFIX-1 … PREFIX-N. Default "fleet".
	NamePrefix string
	// Detach lets the servers outlive this process, as the CLI's `up` needs. Without it they are
	// killed when this process dies, whatever the reason.
	Detach bool
	// ControllerManager also runs kube-controller-manager per cluster, so that namespace deletion,
	// garbage collection and Deployment → ReplicaSet behave as in a real cluster.
	ControllerManager bool
	// APIServerArgs are appended to every kube-apiserver's flags (a later flag wins).
	APIServerArgs []string
	// AuditReads has every API server log the list and watch requests it serves to
	// audit.log in its directory, for Cluster.ReadsBy.
	AuditReads bool
	// ReadyTimeout bounds the wait for each cluster's /readyz. Default 2 minutes.
	ReadyTimeout time.Duration
	// Logf receives progress lines. Default: discard.
	Logf func(format string, args ...any)
}

func (o *Options) defaults() error {
	if o.Clusters == 0 {
		o.Clusters = 3
	}
	if o.Clusters < 0 || o.Clusters > 50 {
		return fmt.Errorf("clusters: %d out of range 1..50", o.Clusters)
	}
	if o.NamePrefix == "" {
		o.NamePrefix = "fleet"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 2 * time.Minute
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.BinDir == "" {
		o.BinDir = DefaultBinDir()
	}
	for _, b := range o.binaries() {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return fmt.Errorf("binary %s not found in %s (run `make tools`): %w", b, o.BinDir, err)
		}
	}
	return nil
}

func (o *Options) binaries() []string {
	b := []string{"etcd", "kube-apiserver"}
	if o.ControllerManager {
		b = append(b, "kube-controller-manager")
	}
	return b
}

// DefaultBinDir is $MULTICACHE_BIN_DIR, else bin/ at the root of the enclosing checkout of this
// module (found by walking up from the working directory), else ./bin.
func DefaultBinDir() string {
	if d := os.Getenv("MULTICACHE_BIN_DIR"); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		return "bin"
	}
	if root, ok := checkoutRoot(wd); ok {
		return filepath.Join(root, "bin")
	}
	return filepath.Join(wd, "bin")
}

// checkoutRoot is the root of the checkout of this module enclosing dir (the directory holding
// hack/build-tools.sh), found by walking up from dir. It serves both modules of the checkout.
func checkoutRoot(dir string) (string, bool) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "hack", "build-tools.sh")); err == nil {
			return d, true
		}
		if filepath.Dir(d) == d {
			return "", false
		}
	}
}

// Fleet is a running set of clusters. Its methods are safe for concurrent use.
type Fleet struct {
	Dir      string     `json:"dir"`
	Clusters []*Cluster `json:"clusters"`
	Detach   bool       `json:"detach"`

	mu   sync.Mutex // serialises state.json and kubeconfig writes
	logf func(string, ...any)
	// starting is set while Start starts the clusters in parallel: each writes its own
	// fields (ports, processes) then, and a save would read every cluster's. Start saves
	// once they are all up. Written only before and after those goroutines.
	starting bool
}

// Start starts the clusters in parallel and returns once every /readyz answers ok and every
// kubeconfig is written. On error everything already started is stopped.
func Start(ctx context.Context, opts Options) (*Fleet, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "multicache-fleet-")
		if err != nil {
			return nil, err
		}
		dir = d
	} else {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		dir = abs
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			if _, err := os.Stat(filepath.Join(dir, stateFile)); err == nil {
				return nil, fmt.Errorf("dir %s: a fleet is already there (stop it with `down` first)", dir)
			}
			return nil, fmt.Errorf("dir %s: exists and is not empty", dir)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	bin, _ := filepath.Abs(opts.BinDir)
	f := &Fleet{Dir: dir, Detach: opts.Detach, logf: opts.Logf}
	for i := 1; i <= opts.Clusters; i++ {
		f.Clusters = append(f.Clusters, &Cluster{
			Name:              opts.NamePrefix + "-" + strconv.Itoa(i),
			Dir:               filepath.Join(dir, opts.NamePrefix+"-"+strconv.Itoa(i)),
			BinDir:            bin,
			ControllerManager: opts.ControllerManager,
			ExtraArgs:         opts.APIServerArgs,
			AuditReads:        opts.AuditReads,
			fleet:             f,
		})
	}
	// All ports at once, so that no two clusters can be handed the same one.
	ports, err := FreePorts(3 * len(f.Clusters))
	if err != nil {
		return nil, fmt.Errorf("ports: %w", err)
	}
	for i, c := range f.Clusters {
		c.APIPort, c.EtcdPort, c.EtcdPeerPort = ports[3*i], ports[3*i+1], ports[3*i+2]
	}
	start := time.Now()
	errs := make([]error, len(f.Clusters))
	var wg sync.WaitGroup
	f.starting = true
	for i, c := range f.Clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.start(ctx, opts.ReadyTimeout)
		}()
	}
	wg.Wait()
	f.starting = false
	if err := errors.Join(errs...); err != nil {
		_ = f.Stop()
		return nil, err
	}
	if err := f.writeKubeconfigs(); err != nil {
		_ = f.Stop()
		return nil, err
	}
	f.logf("fleet: %d clusters ready in %s (dir %s)", len(f.Clusters), time.Since(start).Round(time.Millisecond), dir)
	return f, f.save()
}

const stateFile = "state.json"

// Load reads the fleet recorded in dir by an earlier Start.
func Load(dir string) (*Fleet, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(abs, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("dir %s: %w (start one with `up`)", abs, errNoFleet)
	}
	if err != nil {
		return nil, err
	}
	f := &Fleet{logf: func(string, ...any) {}}
	if err := json.Unmarshal(b, f); err != nil {
		return nil, fmt.Errorf("dir %s: %s: %w", abs, stateFile, err)
	}
	for _, c := range f.Clusters {
		c.fleet = f
	}
	return f, nil
}

// SetLogf sets where progress lines go.
func (f *Fleet) SetLogf(logf func(string, ...any)) { f.logf = logf }

func (f *Fleet) save() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(f.Dir, stateFile), b)
}

// Cluster returns the named cluster, or an error that lists the names there are.
func (f *Fleet) Cluster(name string) (*Cluster, error) {
	var names []string
	for _, c := range f.Clusters {
		if c.Name == name {
			return c, nil
		}
		names = append(names, c.Name)
	}
	return nil, fmt.Errorf("cluster %q: not in this fleet (have %v)", name, names)
}

// Names lists the cluster names in order.
func (f *Fleet) Names() []string {
	names := make([]string, len(f.Clusters))
	for i, c := range f.Clusters {
		names[i] = c.Name
	}
	return names
}

// Kubeconfig is the path of the kubeconfig with one revocable cluster-admin context per cluster.
func (f *Fleet) Kubeconfig() string { return filepath.Join(f.Dir, "kubeconfig") }

// AdminKubeconfig is the path of the kubeconfig with system:masters client certificates.
func (f *Fleet) AdminKubeconfig() string { return filepath.Join(f.Dir, "admin.kubeconfig") }

// LimitedKubeconfig is the path of the kubeconfig for the RBAC-restricted user.
func (f *Fleet) LimitedKubeconfig() string { return filepath.Join(f.Dir, "limited.kubeconfig") }

// Stop stops every process the fleet started (API servers first, then etcd) and removes its
// directory. It is safe to call more than once.
func (f *Fleet) Stop() error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, c := range f.Clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.stopAll(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.RemoveAll(f.Dir); err != nil {
		return fmt.Errorf("remove %s: %w", f.Dir, err)
	}
	return nil
}

// PIDs lists the PIDs of the fleet's live processes.
func (f *Fleet) PIDs() []int {
	var pids []int
	for _, c := range f.Clusters {
		for _, p := range []*proc{c.APIServer, c.Etcd, c.CM} {
			if p.alive() {
				pids = append(pids, p.PID)
			}
		}
	}
	sort.Ints(pids)
	return pids
}

// writeKubeconfigs writes the three kubeconfigs from the clusters' current credentials.
func (f *Fleet) writeKubeconfigs() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	main, admin, limited := clientcmdapi.NewConfig(), clientcmdapi.NewConfig(), clientcmdapi.NewConfig()
	for _, c := range f.Clusters {
		ca, err := os.ReadFile(c.pki().CACert)
		if err != nil {
			return err
		}
		for _, cfg := range []*clientcmdapi.Config{main, admin, limited} {
			cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.URL(), CertificateAuthorityData: ca}
			cfg.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: c.Name}
		}
		main.AuthInfos[c.Name] = &clientcmdapi.AuthInfo{Token: c.Token}
		admin.AuthInfos[c.Name] = &clientcmdapi.AuthInfo{ClientCertificate: c.pki().AdminCert, ClientKey: c.pki().AdminKey}
		limited.AuthInfos[c.Name] = &clientcmdapi.AuthInfo{ClientCertificate: c.pki().LimitedCert, ClientKey: c.pki().LimitedKey}
	}
	if len(f.Clusters) > 0 {
		for _, cfg := range []*clientcmdapi.Config{main, admin, limited} {
			cfg.CurrentContext = f.Clusters[0].Name
		}
	}
	for path, cfg := range map[string]*clientcmdapi.Config{
		f.Kubeconfig(): main, f.AdminKubeconfig(): admin, f.LimitedKubeconfig(): limited,
	} {
		b, err := clientcmd.Write(*cfg)
		if err != nil {
			return err
		}
		if err := writeAtomic(path, b); err != nil {
			return err
		}
	}
	return nil
}

// writeAtomic replaces path so that a reader (a kubeconfig watcher) never sees half a file.
func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Clientset returns a system:masters clientset for the named cluster.
func (f *Fleet) Clientset(name string) (*kubernetes.Clientset, error) {
	c, err := f.Cluster(name)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(c.AdminConfig())
}

// AdminConfig is a system:masters rest.Config, with QPS limits lifted for loaders.
func (c *Cluster) AdminConfig() *rest.Config {
	p := c.pki()
	return &rest.Config{
		Host:            c.URL(),
		TLSClientConfig: rest.TLSClientConfig{CAFile: p.CACert, CertFile: p.AdminCert, KeyFile: p.AdminKey},
		QPS:             -1,
		UserAgent:       "multicache-fleet/" + runtime.Version(),
	}
}

// AliasName is the name of cluster's k-th alias (k from 1): "fleet-1-a07".
func AliasName(cluster string, k int) string { return fmt.Sprintf("%s-a%02d", cluster, k) }

// WriteAliases writes to path a kubeconfig in which each cluster of the fleet appears
// perCluster times, as contexts AliasName(cluster, 1…perCluster), all with its server and its
// revocable token. To multicache these are perCluster × len(Clusters) clusters, each with its
// own stacks and cache, and each alias of a cluster holds that cluster's objects: a fleet of a
// hundred clusters and millions of cached objects on one machine, from a few API servers.
//
// The API servers are shared: a LIST or WATCH of an alias is one of its cluster's, so the
// members' load is the aliases' load on fewer servers, and their CPU competes with the cache's
// on the same cores. The cache shares some equal strings and maps between objects (package
// intern), which equal objects in aliases of one cluster have more of than distinct clusters
// would: a heap per object measured on aliases may be lower. Neither effect is measured yet.
// It returns the aliases' names, sorted.
func (f *Fleet) WriteAliases(path string, perCluster int) ([]string, error) {
	if perCluster < 1 || perCluster > 999 {
		return nil, fmt.Errorf("aliases per cluster: %d out of range 1..999", perCluster)
	}
	cfg := clientcmdapi.NewConfig()
	var names []string
	for _, c := range f.Clusters {
		ca, err := os.ReadFile(c.pki().CACert)
		if err != nil {
			return nil, err
		}
		for k := 1; k <= perCluster; k++ {
			name := AliasName(c.Name, k)
			cfg.Clusters[name] = &clientcmdapi.Cluster{Server: c.URL(), CertificateAuthorityData: ca}
			cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: c.Token}
			cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) > 0 {
		cfg.CurrentContext = names[0]
	}
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, err
	}
	if err := writeAtomic(path, b); err != nil {
		return nil, err
	}
	return names, nil
}
