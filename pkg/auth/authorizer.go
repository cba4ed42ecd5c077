package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
)

// Authorizer identifies the caller of a request and what it may read. The daemon's are a
// static token list (Tokens: every caller reads everything) and delegated auth against a
// management cluster (Delegated).
type Authorizer interface {
	// Authorize authenticates r. An error wrapping ErrUnauthenticated is answered 401; any other
	// error 503.
	Authorize(r *http.Request) (Access, error)
}

// UserAuthorizer is an Authorizer that can also say what a user authenticated elsewhere (by
// the replica a request reached first, which vouches for it with its peer certificate) may
// read.
type UserAuthorizer interface {
	Authorizer
	AccessFor(u user.Info) Access
}

// Access is what one authenticated caller may read. Answers may be cached by the
// implementation; a request asks once per cluster at most.
type Access interface {
	// All reports whether the caller may read every cluster, present and future (not their
	// Secrets: Cluster decides those).
	All(ctx context.Context) (bool, error)
	// Cluster reports whether the caller may read the cluster; with secrets, its Secrets.
	Cluster(ctx context.Context, cluster string, secrets bool) (bool, error)
}

// BatchAccess is an Access that answers for many clusters at once, as a fleet read asks. An
// implementation whose answers each cost a round trip asks them side by side.
type BatchAccess interface {
	Access
	// Clusters answers Cluster for each of clusters, in their order.
	Clusters(ctx context.Context, clusters []string, secrets bool) ([]bool, error)
}

// Clusters answers a.Cluster for each of clusters, all at once when a is a BatchAccess.
func Clusters(ctx context.Context, a Access, clusters []string, secrets bool) ([]bool, error) {
	if b, ok := a.(BatchAccess); ok {
		return b.Clusters(ctx, clusters, secrets)
	}
	out := make([]bool, len(clusters))
	for i, c := range clusters {
		ok, err := a.Cluster(ctx, c, secrets)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", c, err)
		}
		out[i] = ok
	}
	return out, nil
}

// ErrUnauthenticated marks a request without valid credentials.
var ErrUnauthenticated = errors.New("unauthenticated")

// Peer trust, after the model of aggregated API servers: the replica that receives a request
// authenticates the caller once; when it asks other replicas for their share, it sends the
// caller's user and groups in these request headers over mutual TLS, never the caller's
// credentials. An owner believes them only on a request whose client certificate the peer CA
// signed (PeerAuthenticator).
const (
	// PeerUserHeader names the caller a peer replica vouches for.
	PeerUserHeader = "X-Remote-User"
	// PeerGroupHeader names one of its groups; repeated for each.
	PeerGroupHeader = "X-Remote-Group"
	// PeerUIDHeader carries its UID, when it has one.
	PeerUIDHeader = "X-Remote-Uid"
	// PeerExtraHeaderPrefix starts a header per key of its extra attributes (the key
	// URL-path-escaped, as kube-apiserver sends them to aggregated API servers); repeated for
	// each value.
	PeerExtraHeaderPrefix = "X-Remote-Extra-"
)

// Everything is the Access of a caller who reads the whole fleet: every caller when auth is
// off.
type Everything struct{}

// All is true.
func (Everything) All(context.Context) (bool, error) { return true, nil }

// Cluster is true.
func (Everything) Cluster(context.Context, string, bool) (bool, error) { return true, nil }

// Tokens is an Authorizer over a static token list: a caller presenting any of them reads
// everything.
type Tokens []string

// TokenHolder is who a caller with a valid token is, for peers: token auth has no users, and
// every token reads everything.
var TokenHolder user.Info = &user.DefaultInfo{Name: "multicache:token-holder", Groups: []string{user.AllAuthenticated}}

// tokenHolderAccess is the Access of a caller with a valid token: everything, as TokenHolder.
type tokenHolderAccess struct{ Everything }

func (tokenHolderAccess) User() user.Info { return TokenHolder }

// Authorize compares the bearer token with each in constant time.
func (t Tokens) Authorize(r *http.Request) (Access, error) {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || got == "" {
		return nil, fmt.Errorf("%w: missing bearer token", ErrUnauthenticated)
	}
	for _, tok := range t {
		if subtle.ConstantTimeCompare([]byte(got), []byte(tok)) == 1 {
			return tokenHolderAccess{}, nil
		}
	}
	return nil, fmt.Errorf("%w: invalid bearer token", ErrUnauthenticated)
}

// AccessFor is everything: in token mode every authenticated caller reads the whole fleet.
func (Tokens) AccessFor(user.Info) Access { return tokenHolderAccess{} }

// UserOf is who the caller of an Access is, as peers are told: nil when it does not say (auth
// is off).
func UserOf(a Access) user.Info {
	if id, ok := a.(interface{ User() user.Info }); ok {
		return id.User()
	}
	return nil
}

// ReadTokenFile reads one token per line, ignoring blank lines and # comments.
func ReadTokenFile(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("token file %s: no token in it", path)
	}
	return out, nil
}

type accessKey struct{}

// AccessOf is the Access of the caller of ctx: everything when none was set (auth is off).
func AccessOf(ctx context.Context) Access {
	if a, ok := ctx.Value(accessKey{}).(Access); ok {
		return a
	}
	return Everything{}
}

// WithAccess is ctx with a's caller as its caller.
func WithAccess(ctx context.Context, a Access) context.Context {
	return context.WithValue(ctx, accessKey{}, a)
}
