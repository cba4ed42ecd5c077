package clusterset

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/multicache/multicache/pkg/aggregate"
)

// ClusterConfig is one cluster as a Source yields it.
type ClusterConfig struct {
	// Name is the cluster's name in keys, queries and status. Valid per
	// aggregate.ValidateClusterName.
	Name string
	// Origin says where it came from, e.g. `context "kind-a" in /home/me/.kube/config`.
	Origin string
	// Config reaches the cluster. The Registry copies it before changing QPS or user agent.
	// Nil when Err is set.
	Config *rest.Config
	// Err, when set, says why the source could not build Config (a Secret holding a broken
	// kubeconfig). The cluster is engaged in state Failed with this error in its status and
	// touches no other cluster; it restarts when its Fingerprint changes.
	Err error
	// Fingerprint changes exactly when the server or the credentials change; the Registry then
	// restarts the cluster's stacks.
	Fingerprint string
	// Health, when set, is the source's word that the cluster is unhealthy (a ClusterProfile
	// whose ControlPlaneHealthy condition turned False). The cluster keeps running and its
	// cached objects stay; its status is Degraded with Health as its error until the source
	// clears it. A change of Health alone restarts nothing.
	Health string
	// Waiting, when set, is the source's word that the cluster is in the fleet but held back
	// (a ClusterProfile whose control plane has not been healthy yet). The Registry engages it
	// with no stacks: it is Pending, with Waiting as its error, and each resource NotServed, so
	// that it lists nothing and holds back no read or readiness. When Waiting is cleared, the
	// cluster starts. Waiting wins over Err.
	Waiting string
}

// Source is where clusters come from.
type Source interface {
	// Load returns the clusters the source holds now. A non-nil error with clusters means some
	// entries were bad (and are named in the error) while the returned ones are good.
	Load() ([]ClusterConfig, error)
	// Changes receives a value whenever Load may return something new, until ctx ends.
	Changes(ctx context.Context) <-chan struct{}
}

// A HandoffSource is a Source whose Load may leave out clusters that stay in the fleet: another
// replica runs them now (a shard.Coordinator's share). The Registry stops such a cluster as a
// handoff, not a removal: its objects leave the aggregates through aggregate.Membership.Handoff,
// so that whoever relays changes (the server's watches) is told the cluster moved, not that its
// objects were deleted.
type HandoffSource interface {
	Source
	// Retains reports whether cluster, left out of Load, is still in the fleet.
	Retains(cluster string) bool
}

// KubeconfigOptions selects contexts from kubeconfig files.
type KubeconfigOptions struct {
	// Paths are kubeconfig files, merged in order as kubectl merges $KUBECONFIG. Each must exist.
	// Empty: $KUBECONFIG, else ~/.kube/config.
	Paths []string
	// Include and Exclude are globs (path.Match syntax) over context names. Empty Include means
	// every context; Exclude wins over Include.
	Include, Exclude []string
	// Rename maps a context name to the cluster name to use instead.
	Rename map[string]string
	// PollInterval is how often the files are checked for changes. Default 2s.
	PollInterval time.Duration
}

// Kubeconfig is a Source over kubeconfig contexts, loaded through clientcmd: exec credential
// plugins, token files, client certificates and auth providers work as they do for kubectl.
type Kubeconfig struct {
	opts KubeconfigOptions
}

// Default fills unset fields with their defaults.
func (o *KubeconfigOptions) Default() {
	if o.PollInterval == 0 {
		o.PollInterval = 2 * time.Second
	}
}

// Validate reports every bad glob and rename, named as in the config file ("include[0]",
// "rename.ctx").
func (o KubeconfigOptions) Validate() error {
	var errs []error
	for field, globs := range map[string][]string{"include": o.Include, "exclude": o.Exclude} {
		for i, g := range globs {
			if _, err := path.Match(g, ""); err != nil {
				errs = append(errs, fmt.Errorf("%s[%d]: bad glob %q", field, i, g))
			}
		}
	}
	for ctx, name := range o.Rename {
		if err := aggregate.ValidateClusterName(name); err != nil {
			errs = append(errs, fmt.Errorf("rename.%s: %w", ctx, err))
		}
	}
	if o.PollInterval < 0 {
		errs = append(errs, fmt.Errorf("pollInterval %s: must not be negative", o.PollInterval))
	}
	return errors.Join(errs...)
}

// NewKubeconfig defaults and validates opts.
func NewKubeconfig(opts KubeconfigOptions) (*Kubeconfig, error) {
	opts.Default()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return &Kubeconfig{opts: opts}, nil
}

func (k *Kubeconfig) rules() *clientcmd.ClientConfigLoadingRules {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if len(k.opts.Paths) > 0 {
		rules.Precedence = append([]string(nil), k.opts.Paths...)
	}
	return rules
}

func matchAny(globs []string, s string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, s); ok {
			return true
		}
	}
	return false
}

// Load reads and merges the files and returns the selected contexts, sorted by name.
func (k *Kubeconfig) Load() ([]ClusterConfig, error) {
	for _, p := range k.opts.Paths {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", p, err)
		}
	}
	rules := k.rules()
	merged, err := rules.Load()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	names := make([]string, 0, len(merged.Contexts))
	for name := range merged.Contexts {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []ClusterConfig
	var errs []error
	byName := map[string]string{}
	for _, ctxName := range names {
		if len(k.opts.Include) > 0 && !matchAny(k.opts.Include, ctxName) {
			continue
		}
		if matchAny(k.opts.Exclude, ctxName) {
			continue
		}
		name := ctxName
		if r, ok := k.opts.Rename[ctxName]; ok {
			name = r
		}
		if err := aggregate.ValidateClusterName(name); err != nil {
			errs = append(errs, fmt.Errorf("context %q: %w", ctxName, err))
			continue
		}
		if other, dup := byName[name]; dup {
			errs = append(errs, fmt.Errorf("context %q: cluster name %q already used by context %q", ctxName, name, other))
			continue
		}
		kctx := merged.Contexts[ctxName]
		cfg, err := clientcmd.NewNonInteractiveClientConfig(*merged, ctxName, &clientcmd.ConfigOverrides{}, rules).ClientConfig()
		if err != nil {
			errs = append(errs, fmt.Errorf("context %q: %w", ctxName, err))
			continue
		}
		byName[name] = ctxName
		fp, _ := json.Marshal(struct {
			Cluster, Auth any
		}{merged.Clusters[kctx.Cluster], merged.AuthInfos[kctx.AuthInfo]})
		sum := sha256.Sum256(fp)
		origin := fmt.Sprintf("context %q", ctxName)
		if kctx.LocationOfOrigin != "" {
			origin += " in " + kctx.LocationOfOrigin
		}
		out = append(out, ClusterConfig{Name: name, Origin: origin, Config: cfg, Fingerprint: hex.EncodeToString(sum[:8])})
	}
	return out, errors.Join(errs...)
}

// Changes polls the files' contents every PollInterval.
func (k *Kubeconfig) Changes(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	last := k.digest() // taken now: a change made after Changes returns is always reported
	go wait.UntilWithContext(ctx, func(context.Context) {
		if d := k.digest(); d != last {
			last = d
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}, k.opts.PollInterval)
	return ch
}

func (k *Kubeconfig) digest() string {
	h := sha256.New()
	for _, p := range k.rules().GetLoadingPrecedence() {
		b, err := os.ReadFile(p)
		if err != nil {
			fmt.Fprintf(h, "%s: %v\n", p, errors.Is(err, os.ErrNotExist))
			continue
		}
		fmt.Fprintf(h, "%s %d\n", p, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Static is a Source with a fixed set of clusters, for embedding and tests.
type Static []ClusterConfig

// Load returns the clusters.
func (s Static) Load() ([]ClusterConfig, error) { return s, nil }

// Changes never fires.
func (s Static) Changes(ctx context.Context) <-chan struct{} { return nil }

// CompleteError reports bad entries of a load that is complete nonetheless: every cluster
// missing from it has left the source. Without it, an error from Load makes the load partial
// (see Source.Load) and the Registry removes nothing.
type CompleteError struct{ Err error }

func (e *CompleteError) Error() string { return e.Err.Error() }
func (e *CompleteError) Unwrap() error { return e.Err }

// Multi is a Source over several sources, such as kubeconfig contexts and cluster Secrets. A
// cluster name yielded by two sources goes to the first; the other entry is reported as bad.
// Create with NewMulti.
type Multi struct {
	sources []Source
	mu      sync.Mutex
	last    [][]ClusterConfig // per source, what it yielded at the last load (partial ones completed)
}

// NewMulti merges sources, in order of precedence.
func NewMulti(sources ...Source) *Multi {
	return &Multi{sources: sources, last: make([][]ClusterConfig, len(sources))}
}

// Load merges every source's clusters, sorted by name. A source's partial load does not make
// the whole partial: for that source, the clusters it yielded before and misses now are kept
// as they were, so that a removal from another source still takes effect. Its errors, and name
// clashes, are returned as a CompleteError.
func (m *Multi) Load() ([]ClusterConfig, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []ClusterConfig
	var errs []error
	from := map[string]string{}
	for i, src := range m.sources {
		cfgs, err := src.Load()
		var complete *CompleteError
		if err != nil {
			errs = append(errs, err)
			if !errors.As(err, &complete) {
				got := map[string]bool{}
				for _, c := range cfgs {
					got[c.Name] = true
				}
				for _, c := range m.last[i] {
					if !got[c.Name] {
						cfgs = append(cfgs, c)
					}
				}
			}
		}
		m.last[i] = cfgs
		for _, c := range cfgs {
			if other, dup := from[c.Name]; dup {
				errs = append(errs, fmt.Errorf("%s: cluster name %q already used by %s", c.Origin, c.Name, other))
				continue
			}
			from[c.Name] = c.Origin
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if len(errs) > 0 {
		return out, &CompleteError{Err: errors.Join(errs...)}
	}
	return out, nil
}

// Changes fires when any source's does.
func (m *Multi) Changes(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	for _, src := range m.sources {
		ch := src.Changes(ctx)
		if ch == nil {
			continue
		}
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-ch:
					select {
					case out <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	return out
}
