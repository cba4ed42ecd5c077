package sources

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
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
)

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
func (k *Kubeconfig) Load() ([]clusterset.ClusterConfig, error) {
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
	var out []clusterset.ClusterConfig
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
		out = append(out, clusterset.ClusterConfig{Name: name, Origin: origin, Config: cfg, Fingerprint: hex.EncodeToString(sum[:8])})
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
