package sources

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
)

// The Secrets a Secrets source reads.
const (
	// ClusterLabel names the cluster of a Secret holding a kubeconfig in data key
	// ClusterKubeconfigKey.
	ClusterLabel         = "multicache.io/cluster"
	ClusterKubeconfigKey = "kubeconfig"
	// Cluster API writes one Secret per workload cluster named "<cluster>-kubeconfig", of type
	// CAPISecretType, labelled CAPIClusterLabel=<cluster>, with the kubeconfig in data key
	// CAPIKubeconfigKey. Its other Secrets (…-ca, …-sa, …-etcd) share label and type.
	CAPIClusterLabel  = "cluster.x-k8s.io/cluster-name"
	CAPISecretType    = corev1.SecretType("cluster.x-k8s.io/secret")
	CAPIKubeconfigKey = "value"
)

// SecretsOptions selects cluster Secrets in one namespace of a management cluster.
type SecretsOptions struct {
	// Client reaches the management cluster. Required.
	Client kubernetes.Interface
	// Namespace holding the Secrets. Required.
	Namespace string
	// Include and Exclude are globs (path.Match syntax) over cluster names. Empty Include means
	// every cluster; Exclude wins over Include.
	Include, Exclude []string
	// Logger reports Secrets that name no usable cluster. Default: no-op.
	Logger *zap.Logger
}

// Secrets is a Source over kubeconfig Secrets in a management cluster, followed by informers
// (one per label), so clusters join, leave and rotate as Secrets are created, deleted and
// updated. Start it before the clusterset.Registry loads it.
//
// A Secret's kubeconfig must be self-contained: file references, exec plugins and auth
// providers are refused, since whoever may write Secrets in the namespace would otherwise read
// the daemon's files or run programs in it.
type Secrets struct {
	opts    SecretsOptions
	own     listerscorev1.SecretLister
	capi    listerscorev1.SecretLister
	synced  []cache.InformerSynced
	start   func(<-chan struct{})
	changes chan struct{}
}

// NewSecrets validates opts and prepares the informers; nothing runs until Start.
func NewSecrets(opts SecretsOptions) (*Secrets, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	var errs []error
	if opts.Client == nil {
		errs = append(errs, errors.New("secrets: a management cluster client is required (management.kubeconfig, or in-cluster)"))
	}
	if opts.Namespace == "" {
		errs = append(errs, errors.New("sources.secrets.namespace: required"))
	}
	if err := (KubeconfigOptions{Include: opts.Include, Exclude: opts.Exclude}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("sources.secrets: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s := &Secrets{opts: opts, changes: make(chan struct{}, 1)}
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.notify() },
		UpdateFunc: func(any, any) { s.notify() },
		DeleteFunc: func(any) { s.notify() },
	}
	var starts []func(<-chan struct{})
	for _, label := range []string{ClusterLabel, CAPIClusterLabel} {
		f := informers.NewSharedInformerFactoryWithOptions(opts.Client, 0, informers.WithNamespace(opts.Namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = label }))
		inf := f.Core().V1().Secrets()
		if label == CAPIClusterLabel {
			// Cluster API's other Secrets of a cluster (its CA and etcd keys, …) carry the same
			// label: keep none of their data in memory.
			if err := inf.Informer().SetTransform(func(obj any) (any, error) {
				if sec, ok := obj.(*corev1.Secret); ok && sec.Name != sec.Labels[CAPIClusterLabel]+"-kubeconfig" {
					sec.Data, sec.StringData = nil, nil
				}
				return obj, nil
			}); err != nil {
				return nil, err
			}
		}
		if _, err := inf.Informer().AddEventHandler(notify); err != nil {
			return nil, err
		}
		s.synced = append(s.synced, inf.Informer().HasSynced)
		if label == ClusterLabel {
			s.own = inf.Lister()
		} else {
			s.capi = inf.Lister()
		}
		starts = append(starts, f.Start)
	}
	s.start = func(stop <-chan struct{}) {
		for _, st := range starts {
			st(stop)
		}
	}
	return s, nil
}

func (s *Secrets) notify() {
	select {
	case s.changes <- struct{}{}:
	default:
	}
}

// Start runs the informers until ctx ends and waits, at most timeout, for their first list.
func (s *Secrets) Start(ctx context.Context, timeout time.Duration) error {
	s.start(ctx.Done())
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), s.synced...) {
		return fmt.Errorf("secrets in namespace %q of the management cluster: not listed within %s (check the management kubeconfig and that the daemon may list secrets there)", s.opts.Namespace, timeout)
	}
	return nil
}

// Load returns one cluster per usable Secret, sorted by name. A Secret whose kubeconfig cannot
// be used yields its cluster with Err set. Secrets naming a bad or duplicate cluster name are
// logged and skipped: they cannot be shown as a cluster.
func (s *Secrets) Load() ([]clusterset.ClusterConfig, error) {
	own, err := s.own.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	capi, err := s.capi.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	type entry struct {
		sec  *corev1.Secret
		name string
		key  string
	}
	var entries []entry
	for _, sec := range own {
		entries = append(entries, entry{sec, sec.Labels[ClusterLabel], ClusterKubeconfigKey})
	}
	for _, sec := range capi {
		name := sec.Labels[CAPIClusterLabel]
		if sec.Type != CAPISecretType || sec.Name != name+"-kubeconfig" {
			continue // another of Cluster API's Secrets of that cluster
		}
		entries = append(entries, entry{sec, name, CAPIKubeconfigKey})
	}
	// Oldest first, then by Secret name: when two Secrets name one cluster, the first one wins
	// and keeps winning.
	sort.Slice(entries, func(i, j int) bool {
		a, b := entries[i].sec, entries[j].sec
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	byName := map[string]string{}
	var out []clusterset.ClusterConfig
	for _, e := range entries {
		origin := fmt.Sprintf("Secret %s/%s", e.sec.Namespace, e.sec.Name)
		if err := aggregate.ValidateClusterName(e.name); err != nil {
			s.opts.Logger.Warn("cluster Secret skipped", zap.String("secret", origin), zap.Error(err))
			continue
		}
		if len(s.opts.Include) > 0 && !matchAny(s.opts.Include, e.name) || matchAny(s.opts.Exclude, e.name) {
			continue
		}
		if other, dup := byName[e.name]; dup {
			s.opts.Logger.Warn("cluster Secret skipped: cluster name already taken", zap.String("secret", origin), zap.String("cluster", e.name), zap.String("by", other))
			continue
		}
		byName[e.name] = origin
		data := e.sec.Data[e.key]
		sum := sha256.Sum256(data)
		c := clusterset.ClusterConfig{Name: e.name, Origin: origin, Fingerprint: hex.EncodeToString(sum[:8])}
		c.Config, c.Err = secretRESTConfig(data)
		if c.Err != nil {
			c.Config = nil
			c.Err = fmt.Errorf("%s: data key %q: %w", origin, e.key, c.Err)
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// secretRESTConfig builds a client config from a self-contained kubeconfig: its current context,
// or its only one.
func secretRESTConfig(data []byte) (*rest.Config, error) {
	if len(data) == 0 {
		return nil, errors.New("missing or empty")
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("not a kubeconfig: %w", err)
	}
	ctxName := kc.CurrentContext
	if ctxName == "" {
		if len(kc.Contexts) != 1 {
			return nil, fmt.Errorf("no current-context, and %d contexts to choose from", len(kc.Contexts))
		}
		for n := range kc.Contexts {
			ctxName = n
		}
	}
	kctx, ok := kc.Contexts[ctxName]
	if !ok {
		return nil, fmt.Errorf("context %q not found", ctxName)
	}
	if err := selfContained(kc, kctx); err != nil {
		return nil, fmt.Errorf("context %q: %w", ctxName, err)
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*kc, ctxName, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("context %q: %w", ctxName, err)
	}
	return cfg, nil
}

// selfContained refuses what would reach outside the Secret: files, programs, auth providers.
func selfContained(kc *clientcmdapi.Config, kctx *clientcmdapi.Context) error {
	cl, ok := kc.Clusters[kctx.Cluster]
	if !ok {
		return fmt.Errorf("cluster %q not found", kctx.Cluster)
	}
	if cl.CertificateAuthority != "" {
		return errors.New("certificate-authority names a file; embed certificate-authority-data instead")
	}
	ai, ok := kc.AuthInfos[kctx.AuthInfo]
	if !ok {
		return fmt.Errorf("user %q not found", kctx.AuthInfo)
	}
	switch {
	case ai.ClientCertificate != "" || ai.ClientKey != "":
		return errors.New("client-certificate or client-key names a file; embed the -data fields instead")
	case ai.TokenFile != "":
		return errors.New("tokenFile names a file; embed token instead")
	case ai.Exec != nil:
		return errors.New("exec credential plugins are not allowed in a cluster Secret")
	case ai.AuthProvider != nil:
		return errors.New("auth providers are not allowed in a cluster Secret")
	}
	return nil
}

// Changes fires when any cluster Secret is added, updated or deleted.
func (s *Secrets) Changes(ctx context.Context) <-chan struct{} { return s.changes }
