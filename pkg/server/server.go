package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/authentication/authenticator"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/storage/peer"
	"github.com/multicache/multicache/pkg/table"
	"github.com/multicache/multicache/pkg/watchcache"
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
	// WatchBuffer is how many events per resource a watch can resume from. Default 100000.
	WatchBuffer int
	// WatchBufferBytes bounds the memory those events keep alive, estimated from the objects'
	// encoded size: under churn most of them are replaced objects the cache no longer holds.
	// Default 128 MiB.
	WatchBufferBytes int
	// MaxWatches caps open watches; more get 429 Too Many Requests. Default 1000.
	MaxWatches int
	// MaxRequestsInFlight caps concurrent requests other than watches (and health checks);
	// more get 429 Too Many Requests. Default 400.
	MaxRequestsInFlight int
	// HubMaxPending bounds, per resource, the events the aggregate has delivered to the watch
	// hub and the hub has not yet put in its ring. Beyond it the hub loses events, so every
	// watch of the resource ends with 410 and every token expires. It must exceed the largest
	// burst: a cluster re-pointed at another server tells up to two events per object at once.
	// Default 1,000,000 (about 80 MB of queue at most).
	HubMaxPending int
	// BookmarkInterval between BOOKMARK events. Default 5s.
	BookmarkInterval time.Duration
	// DeadClusterTimeout: a cluster × resource that has been failing (Failed or Degraded) for
	// this long stops holding /readyz back; one that is slow, not failing, always does.
	// Default 2m.
	DeadClusterTimeout time.Duration
	// AllowSecretData serves Secrets' data and stringData; otherwise they are removed.
	AllowSecretData bool
	// Metrics is where metrics are registered. Default: a new registry, served on /metrics.
	Metrics *prometheus.Registry
	// Profiling serves Go's runtime profiles under /debug/pprof/, behind the same
	// authentication as /metrics. Default off.
	Profiling bool
	// Fleet, when replicas share the fleet, says which replica owns each cluster: lists, gets
	// and watches then answer for the whole fleet, asking the owners of the clusters this
	// replica does not run (PeerTrust, PeerTimeout). Nil: this replica runs every cluster.
	Fleet Fleet
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
	setInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	setInt(&o.MaxPageSize, 1000)
	setInt(&o.KubeMaxPageSize, 10000)
	setInt(&o.WatchBuffer, 100000)
	setInt(&o.WatchBufferBytes, 128<<20)
	setInt(&o.MaxWatches, 1000)
	setInt(&o.MaxRequestsInFlight, 400)
	setInt(&o.HubMaxPending, 1000000)
	setDuration := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setDuration(&o.RequestTimeout, 30*time.Second)
	setDuration(&o.BookmarkInterval, 5*time.Second)
	setDuration(&o.DeadClusterTimeout, 2*time.Minute)
	setDuration(&o.PeerTimeout, 10*time.Second)
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

// Server is the HTTP API. Create with New, serve Handler().
type Server struct {
	opts    Options
	reg     *clusterset.Registry
	log     *zap.Logger
	started time.Time
	// caches holds each resource's watch cache, cacheRegs its registration as a handler.
	caches    map[string]*watchcache.Cache
	cacheRegs map[string]*aggregate.Registration
	metrics   *metrics
	limits    *filters.Limits
	authn     filters.Authentication

	aliasMu sync.Mutex
	aliases map[string]string // lower-cased alias → configured resource name

	cat       catalogCache
	tables    *table.Set
	openapi   openAPIViews   // the OpenAPI v3 documents of each view, read from the members
	openapiV2 openAPIV2Views // the OpenAPI v2 document of each view, merged from the members' own
	discovery discoveryViews // the aggregated discovery documents of each view

	// local is this replica's own API, without fan-out: what peers and the fan-out call.
	local http.Handler
	peers *peers
}

// New builds the server and registers its watch hubs as handlers on every aggregate; call it
// before the Registry starts so that the hubs see the initial lists.
func New(opts Options) (*Server, error) {
	if opts.Registry == nil {
		return nil, errors.New("server: Options.Registry is required")
	}
	opts.Default()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, reg: opts.Registry, log: opts.Logger, started: time.Now(),
		caches: map[string]*watchcache.Cache{}, cacheRegs: map[string]*aggregate.Registration{}, aliases: map[string]string{},
		limits: filters.NewLimits(opts.MaxWatches, opts.MaxRequestsInFlight), tables: table.NewSet(opts.Tables)}
	for _, res := range s.reg.Resources() {
		agg, _ := s.reg.Aggregate(res)
		h := watchcache.New(watchcache.Options{MaxEvents: opts.WatchBuffer, MaxBytes: opts.WatchBufferBytes, Current: func() []item { return cachedItems(agg) }})
		// Every event, in order: a watch relays the change stream, so an add and delete of the
		// same object while the hub is behind must both reach it. Past HubMaxPending the hub
		// resets (every watch 410) rather than grow without bound.
		hr, err := agg.AddEventHandlerWithOptions(h, aggregate.HandlerOptions{EveryEvent: true, MaxPending: opts.HubMaxPending, OnOverflow: h.Overflow})
		if err != nil {
			return nil, err
		}
		s.caches[res], s.cacheRegs[res] = h, hr
	}
	if opts.PeerAuthenticator == nil && opts.PeerTrust != nil {
		pa, err := auth.PeerAuthenticator(opts.PeerTrust.CAPEM(), nil)
		if err != nil {
			return nil, err
		}
		s.opts.PeerAuthenticator = pa
	}
	s.authn = filters.Authentication{Authorizer: opts.Authorizer, Peers: s.opts.PeerAuthenticator}
	if s.authn.Authorizer == nil && len(opts.Tokens) > 0 {
		s.authn.Authorizer = auth.Tokens(opts.Tokens)
	}
	m, err := newMetrics(s, opts.Metrics)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	if s.handovers() {
		opts.Registry.SetTaker(s.takeHandover)
	}
	return s, nil
}

// Handler is the whole API, with auth, timeouts and metrics applied.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	api := func(route string, h http.HandlerFunc) {
		mux.Handle(route, filters.Instrument(s.metrics.requests, route, s.authn.Wrap(h)))
	}
	limited := s.limits.Limited
	timed := func(h http.HandlerFunc) http.HandlerFunc { return filters.WithTimeout(h, s.opts.RequestTimeout) }
	api("GET /multicache/v1/clusters", limited(timed(s.handleClusters)))
	api("GET /multicache/v1/resources/{resource}", s.handleList) // limits its lists and watches itself; watches have no timeout
	api("GET /multicache/v1/resources/{resource}/{cluster}/{namespace}/{name}", limited(timed(s.handleGet)))
	mux.Handle("GET "+handoverPath+"/{cluster}", filters.Instrument(s.metrics.requests, "GET "+handoverPath+"/{cluster}", s.handoverAuth(limited(s.handleHandover))))
	for _, prefix := range []string{"", "/clusters/{cluster}"} {
		api("GET "+prefix+"/openapi/v3", limited(timed(s.handleOpenAPIV3)))
		api("GET "+prefix+"/openapi/v3/", limited(timed(s.handleOpenAPIV3)))
		api("GET "+prefix+"/openapi/v2", limited(timed(s.handleOpenAPIV2)))
	}
	for path, h := range selfReviewPaths {
		for _, prefix := range []string{"", "/clusters/{cluster}"} {
			api("POST "+prefix+path, limited(timed(h(s))))
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
	mux.Handle("GET /metrics", s.authn.Wrap(limited(s.handleMetrics)))
	if s.opts.Profiling {
		mux.Handle("GET /debug/pprof/", s.authn.Wrap(pprof.Index))
		mux.Handle("GET /debug/pprof/profile", s.authn.Wrap(pprof.Profile))
		mux.Handle("GET /debug/pprof/trace", s.authn.Wrap(pprof.Trace))
		mux.Handle("GET /debug/pprof/symbol", s.authn.Wrap(pprof.Symbol))
	}
	// Everything else is the Kubernetes API (or no route at all): it limits its requests itself,
	// and watches have no timeout.
	mux.Handle("/", filters.Instrument(s.metrics.requests, "kube", s.authn.Wrap(s.handleKube)))
	if s.opts.Fleet == nil {
		return filters.CompressLarge(mux, streams)
	}
	s.local = mux
	s.peers = &peers{clients: peer.NewClients(s.opts.PeerTrust, s.opts.PeerTimeout), timeout: s.opts.PeerTimeout, latency: s.metrics.peerLatency}
	return filters.CompressLarge(s.fanout(mux), streams)
}

// streams tells the requests whose answers stream (watches), as the handlers tell them: they
// are never compressed.
func streams(r *http.Request) bool {
	return isWatch(r.URL.Query()) || strings.Contains(r.URL.Path, "/watch/")
}

// resolve maps a resource as the user wrote it (plural, singular, kind, short name,
// plural.group, or the configured name) to the configured name.
func (s *Server) resolve(name string) (string, bool) {
	if _, ok := s.reg.Aggregate(name); ok {
		return name, true
	}
	key := strings.ToLower(name)
	s.aliasMu.Lock()
	defer s.aliasMu.Unlock()
	if res, ok := s.aliases[key]; ok {
		return res, true
	}
	for _, cs := range s.reg.Status() {
		for _, rs := range cs.Resources {
			for _, a := range rs.Aliases {
				s.aliases[strings.ToLower(a)] = rs.Resource
			}
		}
	}
	res, ok := s.aliases[key]
	return res, ok
}

func (s *Server) aggregate(w http.ResponseWriter, r *http.Request) (string, *aggregate.Aggregate, bool) {
	name := r.PathValue("resource")
	res, ok := s.resolve(name)
	if !ok {
		filters.WriteError(w, http.StatusNotFound, fmt.Sprintf("resource %q is not cached (have %s)", name, strings.Join(s.reg.Resources(), ", ")))
		return "", nil, false
	}
	agg, _ := s.reg.Aggregate(res)
	return res, agg, true
}

// RingHeld reports how many events the watch ring of resource holds, and about how many bytes
// of objects, for reports and tests.
func (s *Server) RingHeld(resource string) (events, bytes int) {
	if h, ok := s.caches[resource]; ok {
		st := h.Stats()
		return st.Held, st.Bytes
	}
	return 0, 0
}

// Close removes the server's watch hubs from the aggregates and empties their rings; open
// watches end with 410. Serving after Close is not supported.
func (s *Server) Close() {
	for res, r := range s.cacheRegs {
		r.Remove()
		<-r.Done()
		s.caches[res].Overflow()
	}
}
