// Package auth owns delegated authentication and authorization: callers are identities of a
// management cluster, checked there by TokenReview (bearer tokens) or against a client CA
// (certificates), and what each may read is decided there by SubjectAccessReview on
// clusters.multicache.io. It composes k8s.io/apiserver's webhook authenticator and authorizer
// and their caches; it keeps no review client of its own.
package auth
