// Package filters is the HTTP plumbing every API handler of the daemon runs in, after
// k8s.io/apiserver's endpoints/filters and responsewriters: authentication (Authenticate,
// which puts the caller's auth.Access in the request's context), limits on concurrent
// requests and watches (Limits), request timeouts (WithTimeout), gzip of large answers
// (CompressLarge), errors as metav1.Status (WriteError), and request metrics (Instrument).
//
// It knows no API: the fronts in package server decide what a request reads.
package filters
