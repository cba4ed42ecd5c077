package sources

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
)

// ClusterProfileGVR is the Cluster Inventory API's ClusterProfile (KEP-4322).
var ClusterProfileGVR = schema.GroupVersionResource{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Resource: "clusterprofiles"}

// ControlPlaneHealthy is the ClusterProfile condition that lets a cluster join.
const ControlPlaneHealthy = "ControlPlaneHealthy"

// clusterProfile holds the fields of a ClusterProfile this source reads.
type clusterProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Status            struct {
		Conditions      []metav1.Condition `json:"conditions"`
		AccessProviders []profileAccess    `json:"accessProviders"`
		// CredentialProviders is the field's former name, still read.
		CredentialProviders []profileAccess `json:"credentialProviders"`
	} `json:"status"`
}

// ClusterProfilesOptions selects the ClusterProfiles of one inventory namespace.
type ClusterProfilesOptions struct {
	// Client reaches the cluster holding the inventory. Required.
	Client dynamic.Interface
	// Namespace is the inventory: its ClusterProfiles are the fleet. Required.
	Namespace string
	// LabelSelector, if set, narrows the inventory; a profile that stops matching leaves.
	LabelSelector string
	// ProviderFile maps access provider names to exec credential plugins (ProviderFile).
	// Required.
	ProviderFile string
	// PollInterval is how often the provider file is checked for changes. Default 2s.
	PollInterval time.Duration
	// Logger reports profiles whose name cannot name a cluster. Default: no-op.
	Logger *zap.Logger
}

// ClusterProfiles is a Source over the ClusterProfiles in one namespace, followed by an
// informer (a list, then a watch: no polling of the API). A cluster is named by its profile and
// reached through the first access provider, in the provider file's order, that its status
// offers, with that provider's exec plugin.
//
// Every profile is in the fleet, so that replicas sharing the fleet agree on it whatever each
// has seen. A profile that appears while the source runs starts once its ControlPlaneHealthy
// condition is True; until then it is Waiting (it runs and lists nothing). Once started, a
// later False or Unknown is reported as the cluster's Health (clusterset.Degraded, its cache kept), not as
// a removal. The profiles present at the first load are taken as started, whatever their
// health: nothing in a profile tells whether it was ever healthy, and a restart, or a replica
// taking a cluster over, must keep serving a cluster that is unhealthy at that moment (a
// profile still being provisioned then starts at once). A changed server, CA, proxy, extension
// or provider entry changes the cluster's Fingerprint, which restarts that cluster only. Start
// it before the clusterset.Registry loads it.
type ClusterProfiles struct {
	opts     ClusterProfilesOptions
	informer cache.SharedIndexInformer
	start    func(<-chan struct{})
	changes  chan struct{}

	mu       sync.Mutex
	joined   map[string]types.UID // profiles started: seen healthy, or present at the first load
	loaded   bool                 // the first load is done
	badNames map[string]bool      // profiles whose name cannot name a cluster, logged once
}

// NewClusterProfiles validates opts, reads the provider file and prepares the informer;
// nothing runs until Start.
func NewClusterProfiles(opts ClusterProfilesOptions) (*ClusterProfiles, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 2 * time.Second
	}
	var errs []error
	if opts.Client == nil {
		errs = append(errs, errors.New("clusterProfiles: a client of the inventory's cluster is required (clusterProfiles.kubeconfig, management.kubeconfig, or in-cluster)"))
	}
	if opts.Namespace == "" {
		errs = append(errs, errors.New("clusterProfiles.namespace: required (--cluster-profiles)"))
	}
	if _, err := labels.Parse(opts.LabelSelector); err != nil {
		errs = append(errs, fmt.Errorf("clusterProfiles.labelSelector: %w", err))
	}
	if opts.ProviderFile == "" {
		errs = append(errs, errors.New("clusterProfiles.providerFile: required (--cluster-profile-provider-file)"))
	} else if _, err := LoadProviderFile(opts.ProviderFile); err != nil {
		errs = append(errs, fmt.Errorf("clusterProfiles.providerFile: %w", err))
	}
	if opts.PollInterval < 0 {
		errs = append(errs, fmt.Errorf("clusterProfiles.pollInterval %s: must not be negative", opts.PollInterval))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s := &ClusterProfiles{opts: opts, changes: make(chan struct{}, 1), joined: map[string]types.UID{}, badNames: map[string]bool{}}
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(opts.Client, 0, opts.Namespace, func(o *metav1.ListOptions) {
		o.LabelSelector = opts.LabelSelector
	})
	s.informer = f.ForResource(ClusterProfileGVR).Informer()
	// Nothing of managedFields is read: keep none of it.
	if err := s.informer.SetTransform(func(obj any) (any, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			u.SetManagedFields(nil)
		}
		return obj, nil
	}); err != nil {
		return nil, err
	}
	if _, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.notify() },
		UpdateFunc: func(any, any) { s.notify() },
		DeleteFunc: func(any) { s.notify() },
	}); err != nil {
		return nil, err
	}
	s.start = f.Start
	return s, nil
}

func (s *ClusterProfiles) notify() {
	select {
	case s.changes <- struct{}{}:
	default:
	}
}

// Start runs the informer until ctx ends and waits, at most timeout, for its first list.
func (s *ClusterProfiles) Start(ctx context.Context, timeout time.Duration) error {
	s.start(ctx.Done())
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), s.informer.HasSynced) {
		return fmt.Errorf("clusterprofiles.%s in namespace %q: not listed within %s (check that the ClusterProfile CRD is installed and that the daemon may list and watch clusterprofiles there)",
			ClusterProfileGVR.Group, s.opts.Namespace, timeout)
	}
	return nil
}

// Load returns one cluster per profile, sorted by name: Waiting until it is started (see
// ClusterProfiles). A profile whose cluster cannot be reached as it says (no provider the file
// names, a bad server) yields its cluster with Err set; the others are unaffected. A provider
// file that cannot be read makes the load fail: the clusters running stay as they are.
func (s *ClusterProfiles) Load() ([]clusterset.ClusterConfig, error) {
	pf, err := LoadProviderFile(s.opts.ProviderFile)
	if err != nil {
		return nil, fmt.Errorf("clusterProfiles: %w", err)
	}
	objs := s.informer.GetStore().List()
	s.mu.Lock()
	defer s.mu.Unlock()
	present := map[string]bool{}
	var out []clusterset.ClusterConfig
	for _, obj := range objs {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		name := u.GetName()
		present[name] = true
		origin := fmt.Sprintf("ClusterProfile %s/%s", u.GetNamespace(), name)
		if err := aggregate.ValidateClusterName(name); err != nil {
			if !s.badNames[name] {
				s.badNames[name] = true
				s.opts.Logger.Warn("ClusterProfile skipped: its name cannot name a cluster", zap.String("profile", origin), zap.Error(err))
			}
			continue
		}
		var p clusterProfile
		b, err := json.Marshal(u.Object)
		if err == nil {
			err = json.Unmarshal(b, &p)
		}
		if err != nil {
			out = append(out, failed(name, origin, fmt.Errorf("%s: %w", origin, err)))
			continue
		}
		c := clusterset.ClusterConfig{Name: name, Origin: origin}
		switch health := profileHealth(&p); {
		case !s.loaded:
			// The fleet as this process finds it: a restart, or a replica taking a cluster
			// over, keeps serving a cluster that is unhealthy at that moment.
			s.joined[name] = p.UID
			if health != "" {
				c.Health = origin + ": " + health
			}
		case health == "":
			s.joined[name] = p.UID
		case s.joined[name] == p.UID:
			c.Health = origin + ": " + health
		default:
			c.Waiting = origin + ": waiting for its control plane to be healthy: " + health
		}
		prov, access, err := pf.access(&p)
		if err == nil {
			c.Origin = fmt.Sprintf("%s, access provider %q", origin, prov.Name)
			c.Config, err = restConfig(prov, access)
		}
		if err != nil {
			c.Config, c.Err = nil, fmt.Errorf("%s: %w", origin, err)
			c.Fingerprint = fingerprint(c.Err.Error())
		} else {
			c.Fingerprint = fingerprint(prov, access)
		}
		out = append(out, c)
	}
	s.loaded = true
	for name := range s.joined {
		if !present[name] {
			delete(s.joined, name)
		}
	}
	for name := range s.badNames {
		if !present[name] {
			delete(s.badNames, name)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// profileHealth is empty when the profile's ControlPlaneHealthy condition is True, else says
// what it is.
func profileHealth(p *clusterProfile) string {
	for _, c := range p.Status.Conditions {
		if c.Type != ControlPlaneHealthy {
			continue
		}
		if c.Status == metav1.ConditionTrue {
			return ""
		}
		h := fmt.Sprintf("condition %s is %s", ControlPlaneHealthy, c.Status)
		if c.Reason != "" || c.Message != "" {
			h += fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
		}
		return h
	}
	return fmt.Sprintf("condition %s is not reported", ControlPlaneHealthy)
}

func failed(name, origin string, err error) clusterset.ClusterConfig {
	return clusterset.ClusterConfig{Name: name, Origin: origin, Err: err, Fingerprint: fingerprint(err.Error())}
}

// fingerprint hashes what reaches a cluster, so that it changes exactly when that does.
func fingerprint(parts ...any) string {
	b, _ := json.Marshal(parts)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// Changes fires when a ClusterProfile is added, updated or deleted, and when the provider
// file's contents change (checked every PollInterval).
func (s *ClusterProfiles) Changes(ctx context.Context) <-chan struct{} {
	last := fileDigest(s.opts.ProviderFile)
	go wait.UntilWithContext(ctx, func(context.Context) {
		if d := fileDigest(s.opts.ProviderFile); d != last {
			last = d
			s.notify()
		}
	}, s.opts.PollInterval)
	return s.changes
}

func fileDigest(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "error: " + err.Error()
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
