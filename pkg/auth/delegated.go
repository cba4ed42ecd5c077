package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/request/x509"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	authorizationcel "k8s.io/apiserver/pkg/authorization/cel"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	webhooktoken "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	webhookauthz "k8s.io/apiserver/plugin/pkg/authorizer/webhook"
	webhookmetrics "k8s.io/apiserver/plugin/pkg/authorizer/webhook/metrics"
	"k8s.io/client-go/kubernetes"
)

// The resource a caller's access is checked on, in the management cluster's authorizer
// (RBAC): get on clusters named C reads cluster C; list on clusters (no name) reads every
// cluster; get on clusters/secrets named C reads C's Secrets, besides.
const (
	Group              = "multicache.io"
	Resource           = "clusters"
	SecretsSubresource = "secrets"
)

// Options configures Delegated.
type Options struct {
	// Client reaches the management cluster. Required.
	Client kubernetes.Interface
	// ClientCAFile, when set, makes client certificates signed by it valid credentials: the
	// user is the certificate's CommonName, its groups its Organizations.
	ClientCAFile string
	// AllowTTL is how long an accepted token and an allowed access review are cached (a
	// review that answers part of a fleet question: from when the whole question is answered).
	// Default 1m.
	AllowTTL time.Duration
	// DenyTTL is how long a rejected token and a denied access review are cached. Default 10s.
	DenyTTL time.Duration
	// Timeout bounds one review request. Default 10s.
	Timeout time.Duration
	// CacheEntries bounds the access reviews' answers kept: one per caller and cluster asked
	// about. Default 262,144 (a fleet of 1,000 for 262 callers).
	CacheEntries int
	// Parallel bounds the access reviews one question about many clusters (a fleet read)
	// sends side by side. Default 16.
	Parallel int
	// Metrics receives the review counters and latencies. Default: not registered.
	Metrics prometheus.Registerer
}

// Default fills unset fields.
func (o *Options) Default() {
	if o.AllowTTL == 0 {
		o.AllowTTL = time.Minute
	}
	if o.DenyTTL == 0 {
		o.DenyTTL = 10 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	if o.CacheEntries == 0 {
		o.CacheEntries = 1 << 18
	}
	if o.Parallel == 0 {
		o.Parallel = 16
	}
}

// Delegated is a Authorizer that asks the management cluster.
type Delegated struct {
	authn authenticator.Request
	authz authorizer.Authorizer
	m     *reviewMetrics
	// timeout bounds each access review (token reviews are bounded by their authenticator).
	timeout time.Duration
	// parallel bounds the reviews one Clusters call sends at once.
	parallel int
	// answers caches the access reviews (the webhook authorizer's own cache is off).
	answers *answers
	// inflight shares one review among the callers that ask the same question of the same
	// user at once: answers only has it once the first review is back, and a caller's ten
	// watches opened together would otherwise send ten reviews per cluster.
	inflight singleflight.Group
}

var _ Authorizer = (*Delegated)(nil)

// New builds the authenticator (TokenReview, and client certificates when ClientCAFile is
// set) behind k8s.io/apiserver's token cache, and the authorizer (SubjectAccessReview) behind
// answers, a cache of this package's own.
func New(opts Options) (*Delegated, error) {
	opts.Default()
	if opts.Client == nil {
		return nil, errors.New("auth: delegated auth needs the management cluster (management.kubeconfig, or run in a Pod)")
	}
	if opts.AllowTTL < 0 || opts.DenyTTL < 0 || opts.Timeout < 0 || opts.Parallel < 0 || opts.CacheEntries < 0 {
		return nil, errors.New("auth: TTLs, timeout, cache entries and parallel must not be negative")
	}
	m, err := newReviewMetrics(opts.Metrics)
	if err != nil {
		return nil, err
	}
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	tokens, err := webhooktoken.NewFromInterface(opts.Client.AuthenticationV1(), nil, backoff, opts.Timeout,
		webhooktoken.AuthenticatorMetrics{RecordRequestTotal: func(context.Context, string) {}, RecordRequestLatency: m.sentFunc("token")})
	if err != nil {
		return nil, fmt.Errorf("auth: token review: %w", err)
	}
	cached := tokencache.New(tokens, false, opts.AllowTTL, opts.DenyTTL)
	reqs := []authenticator.Request{bearertoken.New(countingToken{cached, m})}
	if opts.ClientCAFile != "" {
		pem, err := os.ReadFile(opts.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("server.tls.clientCAFile: %w", err)
		}
		ca, err := dynamiccertificates.NewStaticCAContent("client-ca", pem)
		if err != nil {
			return nil, fmt.Errorf("server.tls.clientCAFile %s: %w", opts.ClientCAFile, err)
		}
		reqs = append([]authenticator.Request{x509.NewDynamic(ca.VerifyOptions, x509.CommonNameUserConversion)}, reqs...)
	}
	// As authorizerfactory.DelegatingAuthorizerConfig builds it, with metrics and a cache of
	// our own (its TTLs zero: answers caches).
	authz, err := webhookauthz.NewFromInterface(opts.Client.AuthorizationV1(), 0, 0, backoff,
		authorizer.DecisionNoOpinion, sentAccessReviews{m: m}, authorizationcel.NewDefaultCompiler())
	if err != nil {
		return nil, fmt.Errorf("auth: subject access review: %w", err)
	}
	ans, err := newAnswers(opts.CacheEntries, opts.AllowTTL, opts.DenyTTL)
	if err != nil {
		return nil, fmt.Errorf("auth: cache entries: %w", err)
	}
	return &Delegated{authn: group.NewAuthenticatedGroupAdder(union.New(reqs...)), authz: authz, m: m,
		timeout: opts.Timeout, parallel: opts.Parallel, answers: ans}, nil
}

// PeerAuthenticator reads who a peer replica says its caller is (PeerUserHeader,
// PeerUIDHeader, PeerGroupHeader, PeerExtraHeaderPrefix), believing it only from a request
// whose client certificate the peers' CA (caPEM, sharding.peerCAFile) signed: k8s.io/apiserver's
// request-header authenticator, as aggregated API servers use for kube-apiserver's requests.
// Every replica has a certificate of its own, so names (the common names allowed) is empty as a
// rule, and then any certificate the CA signed is a replica's: the peer CA must sign replicas'
// certificates only. A request without such a certificate is not authenticated by it (ok
// false); one with a certificate the CA did not sign, or for a name not allowed, is an error.
func PeerAuthenticator(caPEM []byte, names []string) (authenticator.Request, error) {
	ca, err := dynamiccertificates.NewStaticCAContent("peer-ca", caPEM)
	if err != nil {
		return nil, fmt.Errorf("sharding.peerCAFile: %w", err)
	}
	return headerrequest.NewDynamicVerifyOptionsSecure(ca.VerifyOptions, headerrequest.StaticStringSlice(names),
		headerrequest.StaticStringSlice{PeerUserHeader}, headerrequest.StaticStringSlice{PeerUIDHeader},
		headerrequest.StaticStringSlice{PeerGroupHeader}, headerrequest.StaticStringSlice{PeerExtraHeaderPrefix}), nil
}

// SetPeerIdentity names u in the headers of a request to a peer replica, for its
// PeerAuthenticator: name, groups, UID and extra attributes, as kube-apiserver names its
// callers to aggregated API servers.
func SetPeerIdentity(h http.Header, u user.Info) {
	h.Set(PeerUserHeader, u.GetName())
	for _, g := range u.GetGroups() {
		h.Add(PeerGroupHeader, g)
	}
	if uid := u.GetUID(); uid != "" {
		h.Set(PeerUIDHeader, uid)
	}
	for k, vs := range u.GetExtra() {
		// The key escaped (it may hold '/'), as the request-header authenticator unescapes it.
		name := PeerExtraHeaderPrefix + url.PathEscape(k)
		for _, v := range vs {
			h.Add(name, v)
		}
	}
}

// Authorize authenticates r: no credentials, an invalid token or an untrusted certificate is
// ErrUnauthenticated.
func (d *Delegated) Authorize(r *http.Request) (Access, error) {
	resp, ok, err := d.authn.AuthenticateRequest(r)
	switch {
	case err != nil:
		// The cause (an unknown CA, an unreachable management cluster) is not the caller's to
		// read: it may name the management cluster's address.
		return nil, fmt.Errorf("%w: the credentials could not be verified", ErrUnauthenticated)
	case !ok:
		return nil, fmt.Errorf("%w: no valid bearer token or client certificate", ErrUnauthenticated)
	}
	return &access{d: d, user: resp.User}, nil
}

var _ UserAuthorizer = (*Delegated)(nil)

// AccessFor is what u, authenticated by the replica a request reached first (and vouched for
// by that replica's peer certificate), may read: the same reviews as for a caller of this one.
func (d *Delegated) AccessFor(u user.Info) Access { return &access{d: d, user: u} }

// access is one caller's: every question is a (cached) SubjectAccessReview.
type access struct {
	d    *Delegated
	user user.Info

	keyOnce sync.Once
	key     string // userKey's, computed once
}

var _ BatchAccess = (*access)(nil)

// User is the caller, as peers are told.
func (a *access) User() user.Info { return a.user }

func (a *access) All(ctx context.Context) (bool, error) {
	ok, _, err := a.allowed(ctx, "list", "", "")
	return ok, err
}

func (a *access) Cluster(ctx context.Context, cluster string, secrets bool) (bool, error) {
	ok, err := a.All(ctx)
	if err == nil && !ok {
		ok, _, err = a.allowed(ctx, "get", "", cluster)
	}
	if err != nil || !ok || !secrets {
		return ok, err
	}
	ok, _, err = a.allowed(ctx, "get", SecretsSubresource, cluster)
	return ok, err
}

// Clusters asks about every cluster at once, at most Options.Parallel reviews side by side:
// a fleet of 1,000 is 1,000 reviews for a caller who may not list every cluster, and one at a
// time they take longer than a denial is cached. The answers it reviewed are kept from when it
// has them all (answers.restamp).
func (a *access) Clusters(ctx context.Context, clusters []string, secrets bool) ([]bool, error) {
	start := a.d.answers.now()
	var mu sync.Mutex
	var fresh []reviewedKey // the answers this question reviewed
	ask := func(ctx context.Context, verb, sub, name string) (bool, error) {
		key := a.questionKey(verb, sub, name)
		ok, at, err := a.allowedKey(ctx, key, verb, sub, name)
		if err == nil && !at.Before(start) {
			mu.Lock()
			fresh = append(fresh, reviewedKey{key, at})
			mu.Unlock()
		}
		return ok, err
	}
	out := make([]bool, len(clusters))
	all, err := ask(ctx, "list", "", "")
	if err != nil {
		return nil, fmt.Errorf("list on clusters: %w", err)
	}
	if !all || secrets {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(a.d.parallel)
		for i, c := range clusters {
			g.Go(func() error {
				if err := gctx.Err(); err != nil {
					return err // the question has failed: send no more reviews for it
				}
				ok := all
				if !ok {
					var err error
					if ok, err = ask(gctx, "get", "", c); err != nil {
						return fmt.Errorf("cluster %q: %w", c, err)
					}
				}
				if ok && secrets {
					var err error
					if ok, err = ask(gctx, "get", SecretsSubresource, c); err != nil {
						return fmt.Errorf("the Secrets of cluster %q: %w", c, err)
					}
				}
				out[i] = ok
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
	} else {
		for i := range out {
			out[i] = true
		}
	}
	done := a.d.answers.now()
	for _, f := range fresh {
		a.d.answers.restamp(f.key, f.at, done)
	}
	return out, nil
}

// reviewedKey is a question's key and when its review came back.
type reviewedKey struct {
	key string
	at  time.Time
}

// userKey names the user in the keys of answers and inflight: a SHA-256 of every attribute a
// review sends, each length-prefixed, so that no name, group or extra value, whatever bytes it
// holds, makes one user's key another's, and a key's size does not grow with the user's
// groups.
func (a *access) userKey() string {
	a.keyOnce.Do(func() {
		var b strings.Builder
		field := func(tag byte, v string) {
			b.WriteByte(tag)
			b.WriteString(strconv.Itoa(len(v)))
			b.WriteByte(':')
			b.WriteString(v)
		}
		field('n', a.user.GetName())
		field('u', a.user.GetUID())
		for _, g := range a.user.GetGroups() {
			field('g', g)
		}
		extra := a.user.GetExtra()
		for _, k := range slices.Sorted(maps.Keys(extra)) {
			field('e', k)
			for _, v := range extra[k] {
				field('v', v)
			}
		}
		sum := sha256.Sum256([]byte(b.String()))
		a.key = string(sum[:])
	})
	return a.key
}

// questionKey names a question about the caller in answers and inflight (the user's key has a
// fixed size; verb and subresource are this package's constants; name is length-prefixed).
func (a *access) questionKey(verb, sub, name string) string {
	return a.userKey() + "|" + verb + "|" + sub + "|" + strconv.Itoa(len(name)) + ":" + name
}

// allowed answers one question, from answers or by a review shared with every caller asking
// it at once; at is when its review came back.
func (a *access) allowed(ctx context.Context, verb, sub, name string) (ok bool, at time.Time, err error) {
	return a.allowedKey(ctx, a.questionKey(verb, sub, name), verb, sub, name)
}

// allowedKey is allowed with the question's key (questionKey) computed by the caller.
func (a *access) allowedKey(ctx context.Context, key, verb, sub, name string) (ok bool, at time.Time, err error) {
	a.d.m.lookups.WithLabelValues("access").Inc()
	if ok, at, cached := a.d.answers.get(key); cached {
		return ok, at, nil
	}
	if err := ctx.Err(); err != nil {
		return false, time.Time{}, fmt.Errorf("access review: %w", err) // start no review no one waits for
	}
	// The review is shared, so no one caller's cancellation ends it: it is bounded by the
	// timeout alone, and each caller stops waiting when its own context ends.
	answer := a.d.inflight.DoChan(key, func() (v any, err error) {
		defer func() {
			// singleflight re-panics where no request's recovery reaches: a panic is this
			// review's error instead.
			if r := recover(); r != nil {
				err = fmt.Errorf("access review panicked: %v", r)
			}
		}()
		// A review that ended between the look-up above and this flight has answered.
		if ok, at, cached := a.d.answers.get(key); cached {
			return reviewed{ok, at}, nil
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.d.timeout)
		defer cancel()
		dec, _, err := a.d.authz.Authorize(rctx, authorizer.AttributesRecord{
			User: a.user, Verb: verb, APIGroup: Group, Resource: Resource, Subresource: sub, Name: name, ResourceRequest: true,
		})
		if err != nil {
			return nil, err
		}
		r := reviewed{dec == authorizer.DecisionAllow, a.d.answers.now()}
		a.d.answers.put(key, r.allowed, r.at)
		return r, nil
	})
	select {
	case <-ctx.Done():
		return false, time.Time{}, fmt.Errorf("access review: %w", ctx.Err())
	case r := <-answer:
		if r.Err != nil {
			return false, time.Time{}, errors.New("the management cluster could not be asked") // its address is not the caller's to read
		}
		v := r.Val.(reviewed)
		return v.allowed, v.at, nil
	}
}

// reviewed is a review's answer and when it came back.
type reviewed struct {
	allowed bool
	at      time.Time
}

// reviewMetrics count review lookups (every check) and the reviews actually sent: the
// difference is what the caches answered.
type reviewMetrics struct {
	lookups, sent *prometheus.CounterVec
	latency       *prometheus.HistogramVec
}

func newReviewMetrics(reg prometheus.Registerer) (*reviewMetrics, error) {
	m := &reviewMetrics{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "multicache_auth_review_lookups_total",
			Help: "Credential (review=token) and access (review=access) checks, whether cached or not."}, []string{"review"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "multicache_auth_reviews_sent_total",
			Help: "TokenReviews (review=token) and SubjectAccessReviews (review=access) sent to the management cluster: the cache misses."}, []string{"review"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "multicache_auth_review_duration_seconds",
			Help: "Duration of the reviews sent to the management cluster.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"review"}),
	}
	hit := func(review string) func() float64 {
		return func() float64 {
			l, s := counterValue(m.lookups, review), counterValue(m.sent, review)
			if l == 0 {
				return 0
			}
			return max(0, 1-s/l)
		}
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.lookups, m.sent, m.latency,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "multicache_auth_review_cache_hit_ratio", Help: "Share of credential checks answered by the cache.", ConstLabels: prometheus.Labels{"review": "token"}}, hit("token")),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "multicache_auth_review_cache_hit_ratio", Help: "Share of credential checks answered by the cache.", ConstLabels: prometheus.Labels{"review": "access"}}, hit("access")),
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("auth: metrics: %w", err)
		}
	}
	return m, nil
}

func counterValue(v *prometheus.CounterVec, label string) float64 {
	c, err := v.GetMetricWithLabelValues(label)
	if err != nil {
		return 0
	}
	var out dto.Metric
	_ = c.Write(&out)
	return out.GetCounter().GetValue()
}

// countingToken counts every token check that reaches the cache.
type countingToken struct {
	authenticator.Token
	m *reviewMetrics
}

func (c countingToken) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	c.m.lookups.WithLabelValues("token").Inc()
	return c.Token.AuthenticateToken(ctx, token)
}

// sentFunc counts and times one review sent to the management cluster, as the webhook
// clients report each request (their RecordRequestLatency). The clients post through the
// client's RESTClient, so the typed client never sees the reviews.
func (m *reviewMetrics) sentFunc(review string) func(context.Context, string, float64) {
	return func(_ context.Context, _ string, seconds float64) {
		m.sent.WithLabelValues(review).Inc()
		m.latency.WithLabelValues(review).Observe(seconds)
	}
}

// sentAccessReviews is the SubjectAccessReview webhook's metrics: the reviews sent.
type sentAccessReviews struct {
	webhookmetrics.NoopAuthorizerMetrics
	m *reviewMetrics
}

func (s sentAccessReviews) RecordRequestLatency(ctx context.Context, code string, seconds float64) {
	s.m.sentFunc("access")(ctx, code, seconds)
}
