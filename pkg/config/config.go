package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/index"
	"github.com/multicache/multicache/pkg/server"
	"github.com/multicache/multicache/pkg/sources"
)

// Config is the whole file. See configs/multicache.yaml for a commented example.
type Config struct {
	Kubeconfig Kubeconfig `json:"kubeconfig"`
	// Management is the cluster the daemon runs in or is managed from: cluster Secrets and
	// delegated auth live there.
	Management Management `json:"management"`
	Sources    Sources    `json:"sources"`
	// Clusters are fleets named by an inventory: ClusterProfiles.
	Clusters  Clusters      `json:"clusters"`
	Resources []Resource    `json:"resources"`
	Indexes   []Index       `json:"indexes,omitempty"`
	Server    Server        `json:"server"`
	Logging   Logging       `json:"logging"`
	Readiness Readiness     `json:"readiness"`
	Secrets   SecretsPolicy `json:"secrets"`
	// Sharding spreads the fleet's clusters over replicas through Leases in the management
	// cluster; any replica answers for the whole fleet. Off when nil or not enabled.
	Sharding *Sharding `json:"sharding,omitempty"`
	// MemoryLimit is the Go heap's soft limit (a quantity: 3Gi). Default: 90% of the
	// container's memory limit (cgroup), unless GOMEMLIMIT is set.
	MemoryLimit string `json:"memoryLimit,omitempty"`
	// SyncGCPercent is the Go garbage collector's percent (GOGC) while the initial sync runs,
	// within a budget of a quarter of the memory limit in force (or of the machine's memory
	// without one): the memory limit is the budget meanwhile, and GOGC's percent and the limit
	// in force are back once the heap the raise allows, (1 + SyncGCPercent/100) × the live
	// heap, outgrows the budget, or once the sync is over (every cluster synced or failing).
	// -1 turns the collector off meanwhile: it collects only when the heap reaches the budget,
	// and GOGC's percent is back once the live heap outgrows half the budget. Nil: -1. 0, or a
	// percent no higher than the collector's outside the sync (gcPercent, or GOGC's 100), leaves
	// the collector alone, as does GOGC set in the environment. A sharded
	// replica's clusters come through Leases after its first sync is over: its start, as
	// its takeovers, follows sharding.takeoverGCPercent.
	SyncGCPercent *int `json:"syncGCPercent,omitempty"`
	// GCPercent is the Go garbage collector's percent (GOGC) outside the initial sync and
	// takeovers: the heap may grow to (1 + GCPercent/100) × the live heap between
	// collections, so a lower percent holds less garbage for more collector CPU.
	// Nil or 0 leaves the collector alone (GOGC's percent, 100 by default), as does GOGC set in
	// the environment. The sync's and takeovers' raises return to it when they end.
	GCPercent *int `json:"gcPercent,omitempty"`
	// QPS and Burst per cluster client.
	QPS   float32 `json:"qps,omitempty"`
	Burst int     `json:"burst,omitempty"`
	// DisableCompression asks the member API servers for uncompressed answers
	// (clusterset.Options.DisableCompression). Default false: as kubectl, and as each
	// cluster's kubeconfig says.
	DisableCompression bool `json:"disableCompression,omitempty"`
	// UnpagedListMax and UnpagedListBudget decide which first lists are one unpaged LIST from
	// the API server's watch cache rather than streamed (clusterset.Options). 0: the defaults;
	// UnpagedListMax -1: every first list streams.
	UnpagedListMax    int `json:"unpagedListMax,omitempty"`
	UnpagedListBudget int `json:"unpagedListBudget,omitempty"`
}

// Kubeconfig selects the clusters.
type Kubeconfig struct {
	// Paths are merged like $KUBECONFIG. Empty: $KUBECONFIG, else ~/.kube/config.
	Paths   []string          `json:"paths,omitempty"`
	Include []string          `json:"include,omitempty"`
	Exclude []string          `json:"exclude,omitempty"`
	Rename  map[string]string `json:"rename,omitempty"`
	// PollInterval for changes on disk. Default 2s.
	PollInterval Duration `json:"pollInterval,omitempty"`
}

// Management reaches the management cluster. Neither field set: in-cluster config, when
// running in a Pod.
type Management struct {
	Kubeconfig string `json:"kubeconfig,omitempty"`
	Context    string `json:"context,omitempty"`
}

// Sources are cluster sources besides the kubeconfig.
type Sources struct {
	Secrets *SecretsSource `json:"secrets,omitempty"`
}

// Clusters are fleet sources that an inventory names.
type Clusters struct {
	// ClusterProfiles reads the fleet from the Cluster Inventory API (see
	// sources.ClusterProfiles).
	ClusterProfiles *ClusterProfilesSource `json:"clusterProfiles,omitempty"`
}

// ClusterProfilesSource is an inventory of ClusterProfiles: one namespace of a cluster.
type ClusterProfilesSource struct {
	// Namespace is the inventory (--cluster-profiles).
	Namespace string `json:"namespace"`
	// LabelSelector narrows the inventory.
	LabelSelector string `json:"labelSelector,omitempty"`
	// ProviderFile maps access provider names to exec credential plugins, in the JSON the
	// Cluster Inventory API's reference consumers read (--cluster-profile-provider-file).
	ProviderFile string `json:"providerFile"`
	// Kubeconfig and Context reach the cluster holding the inventory. Empty: the management
	// cluster (management.kubeconfig and management.context; in cluster when they are empty too).
	Kubeconfig string `json:"kubeconfig,omitempty"`
	Context    string `json:"context,omitempty"`
}

// InventoryConfig is where the ClusterProfiles live: their own kubeconfig, else the management
// cluster's.
func (p *ClusterProfilesSource) InventoryConfig(m Management) Management {
	if p.Kubeconfig != "" {
		return Management{Kubeconfig: p.Kubeconfig, Context: p.Context}
	}
	return m
}

// SecretsSource reads clusters from kubeconfig Secrets in one namespace of the management
// cluster (see sources.Secrets).
type SecretsSource struct {
	Namespace string   `json:"namespace"`
	Include   []string `json:"include,omitempty"`
	Exclude   []string `json:"exclude,omitempty"`
}

// Sharding is how replicas share the fleet (see shard.Options).
type Sharding struct {
	Enabled bool `json:"enabled"`
	// Namespace of the management cluster where the Leases live. Default: the Secrets
	// source's namespace, else "multicache-system".
	Namespace string `json:"namespace,omitempty"`
	// LeaseDuration: a replica that stops renewing its Lease for this long loses its clusters.
	// Default 15s.
	LeaseDuration Duration `json:"leaseDuration,omitempty"`
	// AdvertiseURL is how the other replicas reach this one (required when enabled).
	AdvertiseURL string `json:"advertiseURL,omitempty"`
	// Identity names this replica among its peers. Default: the peer certificate's common
	// name, else the host name and a random suffix.
	Identity string `json:"identity,omitempty"`
	// Weight is this replica's share of the clusters relative to the others'. Default 1.
	Weight int `json:"weight,omitempty"`
	// MaxWarmups caps the clusters this replica syncs at once, but for those MaxHandovers
	// counts. Default 4.
	MaxWarmups int `json:"maxWarmups,omitempty"`
	// MaxHandovers caps, beside MaxWarmups, the clusters this replica syncs at once that a
	// peer handed over naming itself (it kept the cluster's state, or may yet) in the last 5
	// minutes: such a cluster costs its member a watch, not a list; one whose state is gone by
	// the time it is asked for lists in its slot, so that up to MaxWarmups + MaxHandovers
	// lists may run at once. Default 16; -1: they take MaxWarmups' slots.
	MaxHandovers int `json:"maxHandovers,omitempty"`
	// TakeoverGCPercent is SyncGCPercent for a takeover: the garbage collector's percent while
	// this replica owns more clusters than it warms at once (MaxWarmups and MaxHandovers; a
	// peer died or left, or the fleet grew by many clusters), until every cluster it owns is
	// synced or failing, within the same budget and with the same values. Nil: -1.
	TakeoverGCPercent *int `json:"takeoverGCPercent,omitempty"`
	// PeerCAFile is the peers' CA: it signs every replica's peer certificate, and nothing else
	// (any certificate it signed may vouch for any user).
	PeerCAFile string `json:"peerCAFile,omitempty"`
	// PeerTimeout bounds every call to another replica until its answer's headers arrive, and
	// each read of its body. Default 10s.
	PeerTimeout Duration `json:"peerTimeout,omitempty"`
	// PeerCertFile and PeerKeyFile are this replica's own peer certificate, signed by the CA in
	// PeerCAFile for server and client use, whose DNS names include the replica's identity
	// (which defaults to the certificate's common name). With them, replicas trust each other
	// as aggregated API servers trust kube-apiserver: a peer Lease counts only once its URL
	// answered, over TLS, with the certificate of the replica it names; the replica a request
	// reaches authenticates the caller and tells the owners it asks who the caller is, in
	// request headers over mutual TLS, and an owner believes those headers only from a client
	// certificate the peer CA signed. No credential ever leaves the replica it reached.
	// Required with server.auth; needs server.tls and an https advertiseURL.
	PeerCertFile string `json:"peerCertFile,omitempty"`
	PeerKeyFile  string `json:"peerKeyFile,omitempty"`
}

// PeerTrust reports whether replicas vouch for their callers with peer certificates.
func (s *Sharding) PeerTrust() bool { return s != nil && s.Enabled && s.PeerCertFile != "" }

// ShardingEnabled reports whether replicas share the fleet.
func (c *Config) ShardingEnabled() bool { return c.Sharding != nil && c.Sharding.Enabled }

// Resource is one resource to cache.
type Resource struct {
	Name          string `json:"name"`
	Namespace     string `json:"namespace,omitempty"`
	LabelSelector string `json:"labelSelector,omitempty"`
	FieldSelector string `json:"fieldSelector,omitempty"`
	// Mode: "" (typed for built-ins, unstructured for CRDs), typed, unstructured, metadata.
	Mode      string    `json:"mode,omitempty"`
	Transform Transform `json:"transform,omitempty"`
	// Indexes names built-in indexes to install: label, owner, owner-uid, pod-node, image.
	Indexes []string `json:"indexes,omitempty"`
	// Counts names summary keys whose counts per cluster and value are kept from the start
	// (label:K, field:PATH, index:NAME), beyond namespace, which is always kept.
	Counts []string `json:"counts,omitempty"`
}

// Transform mirrors clusterset.TransformOptions.
type Transform struct {
	KeepManagedFields bool `json:"keepManagedFields,omitempty"`
	KeepLastApplied   bool `json:"keepLastApplied,omitempty"`
	KeepDuplicates    bool `json:"keepDuplicates,omitempty"`
}

// Index is a custom index.
type Index struct {
	Name     string `json:"name"`
	JSONPath string `json:"jsonPath,omitempty"`
	CEL      string `json:"cel,omitempty"`
	// Resources it applies to (names as in resources[].name). Required.
	Resources []string `json:"resources"`
	// Clusters globs; empty: all.
	Clusters []string `json:"clusters,omitempty"`
}

// Server is the HTTP API.
type Server struct {
	// Listen address. Default 127.0.0.1:8080.
	Listen string `json:"listen,omitempty"`
	TLS    *TLS   `json:"tls,omitempty"`
	Auth   *Auth  `json:"auth,omitempty"`
	// AllowInsecure permits listening beyond loopback without auth.
	AllowInsecure bool `json:"allowInsecure,omitempty"`
	// MaxPageSize caps `limit` in the native API. Default 1000.
	MaxPageSize int `json:"maxPageSize,omitempty"`
	// KubeMaxPageSize caps the `limit` of a Kubernetes API list. Default 10000.
	KubeMaxPageSize int `json:"kubeMaxPageSize,omitempty"`
	// RequestTimeout bounds non-watch requests. Default 30s.
	RequestTimeout Duration `json:"requestTimeout,omitempty"`
	// WatchBuffer is how many recent events per resource a watch can resume from. Default 100000.
	WatchBuffer int `json:"watchBuffer,omitempty"`
	// WatchBufferBytes bounds the memory those events keep alive (estimated). Default 128 MiB.
	WatchBufferBytes int `json:"watchBufferBytes,omitempty"`
	// MaxWatches caps open watches (429 beyond). Default 1000.
	MaxWatches int `json:"maxWatches,omitempty"`
	// MaxRequestsInFlight caps concurrent requests other than watches (429 beyond). Default 400.
	MaxRequestsInFlight int `json:"maxRequestsInFlight,omitempty"`
	// Profiling serves Go's runtime profiles under /debug/pprof/, behind the API's
	// authentication. Default false.
	Profiling bool `json:"profiling,omitempty"`
	// BookmarkInterval between BOOKMARK events on a watch. Default 5s.
	BookmarkInterval Duration `json:"bookmarkInterval,omitempty"`
}

// TLS files.
type TLS struct {
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
	// ClientCAFile, with delegated auth, makes client certificates it signed valid credentials.
	ClientCAFile string `json:"clientCAFile,omitempty"`
}

// Auth modes.
const (
	AuthToken     = "token"
	AuthDelegated = "delegated"
)

// Auth is how callers are authenticated and authorized.
type Auth struct {
	// Mode: token (default: bearer tokens from TokenFile, each reading everything) or
	// delegated (TokenReview and SubjectAccessReview against the management cluster).
	Mode string `json:"mode,omitempty"`
	// TokenFile holds one token per line (mode token).
	TokenFile string `json:"tokenFile,omitempty"`
}

// Logging settings.
type Logging struct {
	// Format: json (default) or console.
	Format string `json:"format,omitempty"`
	// Level: debug, info (default), warn, error.
	Level string `json:"level,omitempty"`
}

// Readiness policy for /readyz.
type Readiness struct {
	// DeadClusterTimeout: a cluster × resource that has been failing (Failed or Degraded) this
	// long stops holding readiness back; a slow one, not failing, always holds it. Default 2m.
	DeadClusterTimeout Duration `json:"deadClusterTimeout,omitempty"`
}

// SecretsPolicy: Secrets are only watched if listed in resources; their data is redacted
// unless AllowData.
type SecretsPolicy struct {
	AllowData bool `json:"allowData,omitempty"`
}

// Duration is a time.Duration written as "30s" in YAML.
type Duration struct{ time.Duration }

// UnmarshalJSON parses "1m30s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return []byte(`"` + d.String() + `"`), nil }

// Load reads, strictly decodes, defaults and validates a config file.
func Load(file string) (*Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", file, err)
	}
	return c, nil
}

// Read strictly decodes a config file without defaulting or validating it, for callers that
// override fields (command-line flags) before calling Default and Validate.
func Read(file string) (*Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, fmt.Errorf("config %s: %w", file, err)
	}
	return &c, nil
}

// Parse decodes YAML strictly (unknown fields are errors), applies defaults and validates.
func Parse(b []byte) (*Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, err
	}
	c.Default()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Default fills the fields only the file has: the listen address and logging. Every other
// default belongs to the options the file maps onto (clusterset.Options,
// sources.KubeconfigOptions, server.Options), which apply their own.
func (c *Config) Default() {
	if c.Server.Listen == "" {
		c.Server.Listen = "127.0.0.1:8080"
	}
	if c.Logging.Format == "" {
		c.Logging.Format = "json"
	}
	if c.Logging.Level == "" {
		c.Logging.Level = "info"
	}
}

// Validate checks every field and returns all problems, each naming its field. Fields that map
// onto an options type are checked by that type's Validate; the file adds what only it has:
// custom index definitions and the resources they name, listening, TLS, auth and logging.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if err := c.KubeconfigOptions().Validate(); err != nil {
		errs = append(errs, prefixed("kubeconfig.", err))
	}
	names := map[string]bool{}
	for _, r := range c.Resources {
		names[r.Name] = true
	}
	builtins := index.Builtins()
	for i, r := range c.Resources {
		for j, ix := range r.Indexes {
			if _, ok := builtins[ix]; !ok {
				bad(fmt.Sprintf("resources[%d].indexes[%d]", i, j), "unknown index type %q (want one of %s)", ix, strings.Join(slices.Sorted(maps.Keys(builtins)), ", "))
			}
		}
	}
	for i, ix := range c.Indexes {
		f := fmt.Sprintf("indexes[%d]", i)
		if _, err := index.Compile(index.Spec{Name: ix.Name, JSONPath: ix.JSONPath, CEL: ix.CEL}); err != nil {
			bad(f, "%v", err)
		}
		if len(ix.Resources) == 0 {
			bad(f+".resources", "at least one resource is required")
		}
		for j, r := range ix.Resources {
			if !names[r] {
				bad(fmt.Sprintf("%s.resources[%d]", f, j), "%q is not in resources", r)
			}
		}
	}
	if len(errs) == 0 {
		// Resources, their selectors, modes and indexes, qps/burst and the unpaged lists' bounds:
		// as the Registry checks them.
		specs, err := c.ResourceSpecs()
		if err == nil {
			err = clusterset.Options{Source: clusterset.Static{}, Resources: specs, QPS: c.QPS, Burst: c.Burst,
				UnpagedListMax: c.UnpagedListMax, UnpagedListBudget: c.UnpagedListBudget}.Validate()
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.ServerOptions().Validate(); err != nil {
		errs = append(errs, err)
	}
	if _, _, err := net.SplitHostPort(c.Server.Listen); err != nil {
		bad("server.listen", "%v", err)
	}
	if c.Server.TLS != nil && (c.Server.TLS.CertFile == "" || c.Server.TLS.KeyFile == "") {
		bad("server.tls", "certFile and keyFile are both required")
	}
	if a := c.Server.Auth; a != nil {
		switch a.Mode {
		case "", AuthToken:
			if a.TokenFile == "" {
				bad("server.auth.tokenFile", "required in mode token")
			}
		case AuthDelegated:
			if a.TokenFile != "" {
				bad("server.auth.tokenFile", "not used in mode delegated (tokens are reviewed by the management cluster)")
			}
		default:
			bad("server.auth.mode", "%q is not token or delegated", a.Mode)
		}
	}
	if c.Delegated() && c.Server.TLS == nil && !IsLoopback(c.Server.Listen) {
		bad("server.tls", "required with server.auth.mode delegated beyond loopback: callers send management-cluster tokens")
	}
	if c.Server.TLS != nil && c.Server.TLS.ClientCAFile != "" && !c.Delegated() {
		bad("server.tls.clientCAFile", "needs server.auth.mode: delegated (certificates identify users, whose access the management cluster decides)")
	}
	if s := c.Sources.Secrets; s != nil {
		if s.Namespace == "" {
			bad("sources.secrets.namespace", "required")
		}
		if err := (sources.KubeconfigOptions{Include: s.Include, Exclude: s.Exclude}).Validate(); err != nil {
			errs = append(errs, prefixed("sources.secrets.", err))
		}
	}
	if p := c.Clusters.ClusterProfiles; p != nil {
		if p.Namespace == "" {
			bad("clusters.clusterProfiles.namespace", "required (--cluster-profiles)")
		}
		if p.ProviderFile == "" {
			bad("clusters.clusterProfiles.providerFile", "required (--cluster-profile-provider-file): it names the exec plugin of each access provider")
		}
		if _, err := labels.Parse(p.LabelSelector); err != nil {
			bad("clusters.clusterProfiles.labelSelector", "%v", err)
		}
		if p.Context != "" && p.Kubeconfig == "" {
			bad("clusters.clusterProfiles.context", "needs clusters.clusterProfiles.kubeconfig")
		}
	}
	if p := c.SyncGCPercent; p != nil && (*p < -1 || *p > 10000) {
		bad("syncGCPercent", "%d: want -1 (off until the budget), 0 (leave the collector alone) or up to 10000", *p)
	}
	if p := c.GCPercent; p != nil && (*p < 0 || *p > 10000) {
		bad("gcPercent", "%d: want 0 (leave the collector alone) or a percent from 1 to 10000", *p)
	}
	if c.MemoryLimit != "" {
		if q, err := resource.ParseQuantity(c.MemoryLimit); err != nil || q.Sign() <= 0 {
			bad("memoryLimit", "%q: want a positive quantity such as 3Gi", c.MemoryLimit)
		}
	}
	if sh := c.Sharding; sh != nil && sh.Enabled {
		if sh.AdvertiseURL == "" {
			bad("sharding.advertiseURL", "required when sharding is enabled (--advertise-url): how the other replicas reach this one")
		} else if u, err := url.Parse(sh.AdvertiseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("sharding.advertiseURL", "%q: want an http or https URL such as https://10.0.0.5:8443", sh.AdvertiseURL)
		}
		if sh.LeaseDuration.Duration < 0 || (sh.LeaseDuration.Duration > 0 && sh.LeaseDuration.Duration < time.Second) {
			bad("sharding.leaseDuration", "%s: want at least 1s", sh.LeaseDuration.Duration)
		}
		if sh.Weight < 0 {
			bad("sharding.weight", "%d: must not be negative", sh.Weight)
		}
		if p := sh.TakeoverGCPercent; p != nil && (*p < -1 || *p > 10000) {
			bad("sharding.takeoverGCPercent", "%d: want -1 (off until the budget), 0 (leave the collector alone) or up to 10000", *p)
		}
		if sh.MaxWarmups < 0 {
			bad("sharding.maxWarmups", "%d: must not be negative", sh.MaxWarmups)
		}
		if sh.MaxHandovers < -1 {
			bad("sharding.maxHandovers", "%d: want -1 (handovers take warm-up slots), 0 (the default) or more", sh.MaxHandovers)
		}
		if sh.PeerTimeout.Duration < 0 {
			bad("sharding.peerTimeout", "%s: must not be negative", sh.PeerTimeout.Duration)
		}
		if c.Server.Auth != nil && (sh.PeerCertFile == "" || sh.PeerKeyFile == "" || sh.PeerCAFile == "") {
			var missing []string
			for _, f := range []struct{ name, v string }{{"sharding.peerCertFile", sh.PeerCertFile}, {"sharding.peerKeyFile", sh.PeerKeyFile}, {"sharding.peerCAFile", sh.PeerCAFile}} {
				if f.v == "" {
					missing = append(missing, f.name)
				}
			}
			bad("sharding", "with server.auth, replicas trust each other by peer certificates only (no token leaves a replica): set %s (--peer-cert-file, --peer-key-file, --peer-ca-file)", strings.Join(missing, ", "))
		}
		switch {
		case (sh.PeerCertFile == "") != (sh.PeerKeyFile == ""):
			bad("sharding.peerCertFile", "sharding.peerCertFile and sharding.peerKeyFile go together (--peer-cert-file, --peer-key-file)")
		case sh.PeerCertFile == "":
		case sh.PeerCAFile == "":
			bad("sharding.peerCAFile", "required with sharding.peerCertFile: the CA that signs every replica's peer and serving certificates (--peer-ca-file)")
		case c.Server.TLS == nil:
			bad("sharding.peerCertFile", "needs server.tls: peers prove who they are with client certificates, over TLS")
		case strings.HasPrefix(sh.AdvertiseURL, "http://"):
			bad("sharding.advertiseURL", "%q: with sharding.peerCertFile, advertise an https URL", sh.AdvertiseURL)
		}
	}
	if c.Management.Context != "" && c.Management.Kubeconfig == "" {
		bad("management.context", "needs management.kubeconfig")
	}
	if !IsLoopback(c.Server.Listen) && c.Server.Auth == nil && !c.Server.AllowInsecure {
		bad("server.listen", "%s is not loopback: set server.auth (and server.tls), or allowInsecure: true", c.Server.Listen)
	}
	switch c.Logging.Format {
	case "json", "console":
	default:
		bad("logging.format", "%q is not json or console", c.Logging.Format)
	}
	switch c.Logging.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("logging.level", "%q is not debug, info, warn or error", c.Logging.Level)
	}
	return errors.Join(errs...)
}

// prefixed puts prefix before every error errors.Join joined in err.
func prefixed(prefix string, err error) error {
	var out []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, fmt.Errorf("%s%w", prefix, e))
		}
		return errors.Join(out...)
	}
	return fmt.Errorf("%s%w", prefix, err)
}

// Delegated reports whether callers are checked by the management cluster.
func (c *Config) Delegated() bool { return c.Server.Auth != nil && c.Server.Auth.Mode == AuthDelegated }

// NeedsManagement reports whether anything configured lives in the management cluster.
func (c *Config) NeedsManagement() bool {
	return c.Delegated() || c.Sources.Secrets != nil || c.ShardingEnabled() ||
		c.Clusters.ClusterProfiles != nil && c.Clusters.ClusterProfiles.Kubeconfig == ""
}

// IsLoopback reports whether a listen address binds only to loopback.
func IsLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ResourceSpecs builds the clusterset resource specs, indexes included. It compiles the custom
// indexes; the specs are validated where they are used (clusterset.Options.Validate).
func (c *Config) ResourceSpecs() ([]clusterset.ResourceSpec, error) {
	var out []clusterset.ResourceSpec
	builtins := index.Builtins()
	for _, r := range c.Resources {
		spec := clusterset.ResourceSpec{
			Name: r.Name, Namespace: r.Namespace, LabelSelector: r.LabelSelector, FieldSelector: r.FieldSelector,
			Mode:      clusterset.Mode(r.Mode),
			Transform: clusterset.TransformOptions{KeepManagedFields: r.Transform.KeepManagedFields, KeepLastApplied: r.Transform.KeepLastApplied, KeepDuplicates: r.Transform.KeepDuplicates},
			Counts:    r.Counts,
		}
		for _, ix := range r.Indexes {
			spec.Indexes = append(spec.Indexes, aggregate.IndexSpec{Name: ix, Func: builtins[ix]})
		}
		for _, ix := range c.Indexes {
			for _, rn := range ix.Resources {
				if rn != r.Name {
					continue
				}
				f, err := index.Compile(index.Spec{Name: ix.Name, JSONPath: ix.JSONPath, CEL: ix.CEL})
				if err != nil {
					return nil, err
				}
				spec.Indexes = append(spec.Indexes, aggregate.IndexSpec{Name: ix.Name, Func: f, Clusters: ix.Clusters})
			}
		}
		out = append(out, spec)
	}
	return out, nil
}

// ServerOptions maps the server and readiness sections onto server.Options (Registry, Logger
// and Tokens are the caller's).
func (c *Config) ServerOptions() server.Options {
	return server.Options{
		MaxPageSize: c.Server.MaxPageSize, KubeMaxPageSize: c.Server.KubeMaxPageSize, RequestTimeout: c.Server.RequestTimeout.Duration,
		WatchBuffer: c.Server.WatchBuffer, WatchBufferBytes: c.Server.WatchBufferBytes,
		MaxWatches: c.Server.MaxWatches, MaxRequestsInFlight: c.Server.MaxRequestsInFlight,
		BookmarkInterval: c.Server.BookmarkInterval.Duration, DeadClusterTimeout: c.Readiness.DeadClusterTimeout.Duration,
		AllowSecretData: c.Secrets.AllowData, Profiling: c.Server.Profiling,
	}
}

// KubeconfigOptions builds the kubeconfig source options.
func (c *Config) KubeconfigOptions() sources.KubeconfigOptions {
	return sources.KubeconfigOptions{
		Paths: c.Kubeconfig.Paths, Include: c.Kubeconfig.Include, Exclude: c.Kubeconfig.Exclude,
		Rename: c.Kubeconfig.Rename, PollInterval: c.Kubeconfig.PollInterval.Duration,
	}
}

// DefaultSyncGCPercent is SyncGCPercent's default.
const DefaultSyncGCPercent = -1

// SyncGC is the garbage collector's percent for the initial sync: SyncGCPercent, or its
// default.
func (c *Config) SyncGC() int {
	if c.SyncGCPercent == nil {
		return DefaultSyncGCPercent
	}
	return *c.SyncGCPercent
}

// SteadyGC is the garbage collector's percent outside the initial sync and takeovers:
// GCPercent, or 0 (the collector left alone).
func (c *Config) SteadyGC() int {
	if c.GCPercent == nil {
		return 0
	}
	return *c.GCPercent
}

// TakeoverGC is the garbage collector's percent for a sharded replica's takeovers:
// sharding.takeoverGCPercent, or its default (DefaultSyncGCPercent).
func (c *Config) TakeoverGC() int {
	if c.Sharding == nil || c.Sharding.TakeoverGCPercent == nil {
		return DefaultSyncGCPercent
	}
	return *c.Sharding.TakeoverGCPercent
}
