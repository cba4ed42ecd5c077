package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/authentication/authenticator"

	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/kubeapi"
	"github.com/multicache/multicache/pkg/kubeapi/discovery"
	"github.com/multicache/multicache/pkg/nativeapi"
	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/storage/fanout"
	"github.com/multicache/multicache/pkg/storage/local"
	"github.com/multicache/multicache/pkg/storage/peer"
	"github.com/multicache/multicache/pkg/table"
)

// Options configures a Server.
type Options struct {
	Registry *clusterset.Registry // required
	Logger   *zap.Logger
	// Tokens accepted as "Authorization: Bearer …", each granting the whole fleet. Ignored when
	// Authorizer is set. Neither: no auth.
	Tokens []string
	// Authorizer authenticates every request but /healthz and the terse /readyz, and decides
	// which clusters each caller reads: in every list, get and watch of both APIs, the clusters
	// endpoints, /readyz?verbose and /metrics.
	Authorizer auth.Authorizer
	// MaxPageSize caps `limit` in the native API; it is also the page size when no limit is
	// given. Default 1000.
	MaxPageSize int
	// KubeMaxPageSize caps the `limit` of a Kubernetes API list: a client that sets a limit
	// gets at most this many items per page, and the rest by `continue`. A list without a limit
	// answers every item, as an API server does (streamed, never encoded whole). kubectl pages
	// by 500 unless told otherwise (--chunk-size). Default 10000.
	KubeMaxPageSize int
	// RequestTimeout bounds every request but watches. Default 30s.
	RequestTimeout time.Duration
	// WatchBuffer, WatchBufferBytes, HubMaxPending, BookmarkInterval, DeadClusterTimeout and
	// AllowSecretData are the local storage's (storage/local.Options).
	WatchBuffer        int
	WatchBufferBytes   int
	HubMaxPending      int
	BookmarkInterval   time.Duration
	DeadClusterTimeout time.Duration
	AllowSecretData    bool
	// MaxWatches caps open watches; more get 429 Too Many Requests. Default 1000.
	MaxWatches int
	// MaxRequestsInFlight caps concurrent requests other than watches (and health checks);
	// more get 429 Too Many Requests. Default 400.
	MaxRequestsInFlight int
	// Metrics is where metrics are registered. Default: a new registry, served on /metrics.
	Metrics *prometheus.Registry
	// Profiling serves Go's runtime profiles under /debug/pprof/, behind the same
	// authentication as /metrics. Default off.
	Profiling bool
	// Fleet, when replicas share the fleet, says which replica owns each cluster: every read
	// then answers for the whole fleet, asking the owners of the clusters this replica does not
	// run (storage/fanout). Nil: this replica runs every cluster.
	Fleet fanout.Fleet
	// PeerTrust is how replicas prove who they are to each other (peer.Trust): a call to a
	// peer goes over TLS to the identity its fence names, presents this replica's peer
	// certificate and names the caller (user, groups, UID, extras), never its credentials;
	// handovers go under it too. A Fleet with auth on (Authorizer or Tokens) requires it: no
	// token, the caller's or the daemon's, ever leaves a replica. Without it (auth off, on
	// loopback) calls are plain and carry no identity.
	PeerTrust *peer.Trust
	// PeerTimeout bounds every call to another replica until its answer's headers arrive, and
	// each read of its body. Default 10s.
	PeerTimeout time.Duration
	// PeerAuthenticator believes the identity headers of a request it authenticates: a peer's,
	// under a client certificate the peers' CA signed, as k8s.io/apiserver's request-header
	// authenticator checks. Default: built from PeerTrust's CA. The Authorizer must then be an
	// auth.UserAuthorizer.
	PeerAuthenticator authenticator.Request
	// Tables supplies the Table columns of built-in kinds for the Kubernetes API (kubectl get).
	// The daemon sets Kubernetes' own printers. Without it, built-in kinds get NAME and AGE.
	Tables table.Provider
}

// Default fills every unset field with its default.
func (o *Options) Default() {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	for _, f := range []struct {
		v   *int
		def int
	}{{&o.MaxPageSize, 1000}, {&o.KubeMaxPageSize, 10000}, {&o.MaxWatches, 1000}, {&o.MaxRequestsInFlight, 400}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 30 * time.Second
	}
	if o.PeerTimeout == 0 {
		o.PeerTimeout = 10 * time.Second
	}
	if o.Metrics == nil {
		o.Metrics = prometheus.NewRegistry()
	}
}

// Validate reports every bad field, named as the config file names it (server.maxWatches).
// The Registry is New's to check.
func (o Options) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"maxPageSize", o.MaxPageSize}, {"kubeMaxPageSize", o.KubeMaxPageSize}, {"watchBuffer", o.WatchBuffer}, {"watchBufferBytes", o.WatchBufferBytes},
		{"maxWatches", o.MaxWatches}, {"maxRequestsInFlight", o.MaxRequestsInFlight}, {"hubMaxPending", o.HubMaxPending}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("server.%s: %d: must not be negative", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"server.requestTimeout", o.RequestTimeout}, {"server.bookmarkInterval", o.BookmarkInterval}, {"readiness.deadClusterTimeout", o.DeadClusterTimeout}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s: %s: must not be negative", f.name, f.v))
		}
	}
	if o.Fleet != nil && (o.Authorizer != nil || len(o.Tokens) > 0) && o.PeerTrust == nil {
		errs = append(errs, errors.New("sharding: with server.auth, replicas trust each other by peer certificates only: set sharding.peerCertFile, sharding.peerKeyFile and sharding.peerCAFile"))
	}
	return errors.Join(errs...)
}

// Server wires the daemon's HTTP surface: the fronts (package kubeapi, package nativeapi) over
// one storage.Reader (storage/local, or storage/fanout over the owners), the envelope other
// replicas read this one through (storage/peer), the handover endpoint, health, readiness and
// metrics. Create with New, serve Handler().
type Server struct {
	opts    Options
	reg     *clusterset.Registry
	local   *local.Storage
	fleet   *fanout.Reader // nil without a Fleet
	clients *peer.Clients
	kube    *kubeapi.API
	native  *nativeapi.API
	reviews *discovery.Reviews
	peer    *peer.Handler
	metrics *metrics
	limits  *filters.Limits
	authn   filters.Authentication
}

// New builds the server and registers its watch caches as handlers on every aggregate: call
// it before the Registry starts so that they see the initial lists.
func New(opts Options) (*Server, error) {
	if opts.Registry == nil {
		return nil, errors.New("server: Options.Registry is required")
	}
	opts.Default()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	st, err := local.New(local.Options{Registry: opts.Registry, Logger: opts.Logger, WatchBuffer: opts.WatchBuffer, WatchBufferBytes: opts.WatchBufferBytes,
		HubMaxPending: opts.HubMaxPending, BookmarkInterval: opts.BookmarkInterval, DeadClusterTimeout: opts.DeadClusterTimeout, AllowSecretData: opts.AllowSecretData})
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, reg: opts.Registry, local: st, limits: filters.NewLimits(opts.MaxWatches, opts.MaxRequestsInFlight)}
	if s.opts.PeerAuthenticator == nil && opts.PeerTrust != nil {
		if s.opts.PeerAuthenticator, err = auth.PeerAuthenticator(opts.PeerTrust.CAPEM(), nil); err != nil {
			return nil, err
		}
	}
	s.authn = filters.Authentication{Authorizer: opts.Authorizer, Peers: s.opts.PeerAuthenticator}
	if s.authn.Authorizer == nil && len(opts.Tokens) > 0 {
		s.authn.Authorizer = auth.Tokens(opts.Tokens)
	}
	if s.metrics, err = newMetrics(s, opts.Metrics); err != nil {
		return nil, err
	}
	var reader storage.Reader = st
	var status storage.Status = st
	var fleetClusters func() []string
	if opts.Fleet != nil {
		s.clients = peer.NewClients(opts.PeerTrust, opts.PeerTimeout)
		if s.fleet, err = fanout.New(fanout.Options{Fleet: opts.Fleet, Local: st, Peer: func(id, url string) fanout.ReadStatus {
			return &peer.Client{ID: id, URL: url, Clients: s.clients, Timeout: opts.PeerTimeout, Latency: s.metrics.peerLatency}
		}}); err != nil {
			return nil, err
		}
		reader, status = s.fleet, s.fleet
		fleetClusters = func() []string {
			var out []string
			for _, o := range opts.Fleet.Owners() {
				out = append(out, o.Cluster)
			}
			return out
		}
		if s.handovers() {
			pf, _ := opts.Fleet.(interface{ Peers() []shard.Peer })
			h := &peer.Handovers{Clients: s.clients, Owners: opts.Fleet.Owners, Timeout: opts.PeerTimeout}
			if pf != nil {
				h.Peers = pf.Peers
			}
			opts.Registry.SetTaker(h.Take)
		}
	}
	catalog := discovery.NewCatalog(func(ctx context.Context) ([]clusterset.ClusterStatus, error) {
		return status.Resources(ctx, storage.ClusterOptions{})
	})
	own := discovery.NewCatalog(func(context.Context) ([]clusterset.ClusterStatus, error) { return s.reg.Status(), nil })
	openAPI := &discovery.OpenAPI{Catalog: own, Configs: s.reg.RESTConfig, Timeout: opts.PeerTimeout, Logger: opts.Logger}
	ko := kubeapi.Options{Reader: reader, Status: status, Catalog: catalog, Documents: &discovery.Documents{}, OpenAPI: openAPI,
		Resources: s.reg.Resources(), Fleet: fleetClusters, Tables: opts.Tables, Limits: s.limits, RequestTimeout: opts.RequestTimeout,
		MaxPageSize: opts.KubeMaxPageSize, Watches: s.metrics.watches, Logger: opts.Logger}
	if opts.Fleet != nil {
		ko.Here, ko.Relay = s.reg.Running, s.relay
	}
	s.kube = kubeapi.New(ko)
	s.reviews = &discovery.Reviews{Catalog: catalog, Fleet: fleetClusters}
	s.native = nativeapi.New(nativeapi.Options{Reader: reader, Status: status, Info: st.Info, Limits: s.limits, RequestTimeout: opts.RequestTimeout,
		MaxPageSize: opts.MaxPageSize, Watches: s.metrics.watches, NotCached: st.NotCached,
		Resolve: func(ctx context.Context, name string) (string, bool) {
			return catalog.Resolve(ctx, name, s.reg.Resources())
		}})
	s.peer = &peer.Handler{Reader: st, Status: st, Encoders: s.encoders, Relay: s.kube}
	return s, nil
}

// encoders are the fronts' encodings, for the peer envelope: each API's.
func (s *Server) encoders(ctx context.Context, e storage.Encoding, resource string) (storage.Encoder, error) {
	if e.API == storage.NativeAPI {
		return s.native.Encoders(ctx, e, resource)
	}
	return s.kube.Encoders(ctx, e, resource)
}

// Handler is the whole API, with auth, limits, timeouts and metrics applied.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	api := func(route string, h http.Handler) {
		mux.Handle(route, filters.Instrument(s.metrics.requests, route, s.authn.Wrap(h.ServeHTTP)))
	}
	gated := s.coordinated
	api("GET /multicache/v1/clusters", gated(http.HandlerFunc(s.native.Clusters)))
	api("GET /multicache/v1/resources/{resource}", gated(http.HandlerFunc(s.native.List)))
	api("GET /multicache/v1/resources/{resource}/summary", gated(http.HandlerFunc(s.native.Summary)))
	api("GET /multicache/v1/resources/{resource}/{cluster}/{namespace}/{name}", gated(http.HandlerFunc(s.native.Get)))
	api("POST "+peer.Path+"{call}", s.peers(s.peer))
	mux.Handle("GET "+peer.HandoverPath+"/{cluster}", filters.Instrument(s.metrics.requests, "GET "+peer.HandoverPath+"/{cluster}", s.handoverAuth(s.limits.Limited(s.handover))))
	timed := func(h http.HandlerFunc) http.HandlerFunc { return filters.WithTimeout(h, s.opts.RequestTimeout) }
	for path, h := range s.reviews.ReviewPaths() {
		for _, prefix := range []string{"", "/clusters/{cluster}"} {
			api("POST "+prefix+path, s.limits.Limited(timed(h)))
		}
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	verbose := s.authn.Wrap(s.handleReady)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("verbose") {
			verbose(w, r) // names clusters: behind auth
			return
		}
		s.handleReady(w, r)
	})
	mux.Handle("GET /metrics", s.authn.Wrap(s.limits.Limited(s.handleMetrics)))
	if s.opts.Profiling {
		mux.Handle("GET /debug/pprof/", s.authn.Wrap(pprof.Index))
		mux.Handle("GET /debug/pprof/profile", s.authn.Wrap(pprof.Profile))
		mux.Handle("GET /debug/pprof/trace", s.authn.Wrap(pprof.Trace))
		mux.Handle("GET /debug/pprof/symbol", s.authn.Wrap(pprof.Symbol))
	}
	// Everything else is the Kubernetes API (or no route at all): it limits its requests
	// itself, and watches have no timeout.
	api("/", gated(s.kube))
	return filters.CompressLarge(mux, streams)
}

// streams tells the requests whose answers stream (watches): they are never compressed. A
// query that does not name watch is not parsed here: the front parses it, once.
func streams(r *http.Request) bool {
	return (strings.Contains(r.URL.RawQuery, "watch") && filters.IsWatch(r.URL.Query())) || strings.Contains(r.URL.Path, "/watch/") ||
		strings.HasPrefix(r.URL.Path, peer.Path)
}

// coordinated answers 429 while this replica cannot answer for the fleet (not coordinated with
// its peers, or self-fenced): until it knows the fleet's owners it cannot tell which clusters an
// answer spans, and an empty answer would read as deletes to every client. It runs after
// authentication.
func (s *Server) coordinated(h http.Handler) http.Handler {
	if s.fleet == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.fleet.Ready(); err != nil {
			filters.WriteAPIError(w, err)
			return
		}
		if r.Header.Get(previousPeerHeader) != "" {
			filters.WriteAPIError(w, storage.Retry(http.StatusServiceUnavailable, "a replica of a release before the peer envelope asked for its part of a read ("+
				previousPeerHeader+"); this one answers replicas through "+peer.Path+" (peer protocol "+peer.ProtocolVersion+
				") only: its answer to that call would be the whole fleet's. Retry once the rolling update has replaced the replica that asked"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// previousPeerHeader marked, in the releases before the peer envelope, a replica's call for its
// part of a read, sent on the APIs' own paths. This release neither sends it nor answers such a
// call: during a rolling update from such a release, a read spanning clusters of replicas of
// both releases is refused (503), never answered twice over or in part. (The previous release,
// envelope 3, is answered: peer.OldestProtocolVersion.)
const previousPeerHeader = "X-Multicache-Peer"

// peers guards the envelope: another replica's call, under a peer certificate when auth is
// on (the caller it names is authenticated by then), once this replica is coordinated, in a
// request slot (a watch in a watch slot).
func (s *Server) peers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every answer of the route names its envelope version and the newest this release
		// speaks, its refusals too: a caller tells a replica that does not speak the envelope
		// by the header's absence, and one updated in place by the newest.
		w.Header().Set(peer.ProtocolHeader, peer.AnswerVersion(r.Header.Get(peer.ProtocolHeader)))
		w.Header().Set(peer.NewestProtocolHeader, peer.ProtocolVersion)
		if s.authn.Authorizer != nil && !filters.FromPeer(r.Context()) {
			filters.WriteError(w, http.StatusForbidden, "forbidden: "+peer.Path+" is for the replicas themselves, under their peer certificates")
			return
		}
		if r.URL.Path == peer.WatchPath {
			s.limits.Watch(w, func() { s.coordinated(h).ServeHTTP(w, r) })
			return
		}
		s.limits.Request(w, func() { s.coordinated(h).ServeHTTP(w, r) })
	})
}

// relay answers a request of a cluster this replica does not run (its OpenAPI documents) at
// the cluster's owner.
func (s *Server) relay(w http.ResponseWriter, r *http.Request, cluster string) {
	for _, o := range s.opts.Fleet.Owners() {
		if o.Cluster != cluster {
			continue
		}
		if o.Holder == "" || (!o.Live && !o.Self) || o.URL == "" {
			filters.WriteAPIError(w, storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("cluster %q cannot be read now: no live replica owns it; retry", cluster)))
			return
		}
		(&peer.Client{ID: o.Holder, URL: o.URL, Clients: s.clients, Timeout: s.opts.PeerTimeout, Latency: s.metrics.peerLatency}).Relay(w, r)
		return
	}
	filters.WriteError(w, http.StatusNotFound, fmt.Sprintf("cluster %q is not in the fleet", cluster))
}

// Local is this replica's own storage: its watch caches and what it holds.
func (s *Server) Local() *local.Storage { return s.local }

// Close removes the server's watch caches from the aggregates and empties their rings; open
// watches end with 410. Serving after Close is not supported.
func (s *Server) Close() { s.local.Close() }
