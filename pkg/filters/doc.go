// Package filters is the HTTP plumbing every API handler of the daemon runs in, after
// k8s.io/apiserver's endpoints/filters and responsewriters: authentication (Authenticate,
// which puts the caller's auth.Access in the request's context), limits on concurrent
// requests and watches (Limits), request timeouts (WithTimeout), gzip of large answers
// (CompressLarge), errors as metav1.Status (WriteError), and request metrics (Instrument).
//
// It knows no API: the fronts (packages kubeapi and nativeapi) decide what a request reads.
//
// Files: authenticate.go (authentication: tokens, delegated, peers), limits.go (in-flight
// requests and watches, timeouts), params.go (list options decoded as kube-apiserver decodes
// them), status.go (Status errors and warnings), compress.go (gzip of large answers),
// instrument.go (request metrics).
package filters
