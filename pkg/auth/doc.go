// Package auth owns who a caller is and what it may read:
//   - the types every API checks against: Authorizer (authenticates a request), Access (what
//     one caller may read, per cluster and for Secrets), UserAuthorizer (what a user a peer
//     replica vouches for may read), and ErrUnauthenticated;
//   - Tokens, a static token list whose holders read everything;
//   - Delegated, authentication and authorization delegated to a management cluster: callers
//     are its identities, checked there by TokenReview (bearer tokens) or against a client CA
//     (certificates), and what each may read is decided there by SubjectAccessReview on
//     clusters.multicache.io;
//   - PeerAuthenticator, which believes the user a peer replica names (PeerUserHeader) only
//     from a client certificate the peers' CA signed.
//
// It composes k8s.io/apiserver's webhook authenticator and authorizer, their caches and its
// request-header authenticator; it keeps no review client of its own, and knows nothing of
// the HTTP API it guards.
//
// Files: authorizer.go (Access, static tokens, the user of a request), delegated.go
// (TokenReview and SubjectAccessReview through k8s.io/apiserver, the peers' request-header
// authenticator), answers.go (the cache of access reviews' answers, per user and question).
package auth
