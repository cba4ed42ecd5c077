// Package nativeapi is the native API's front under /multicache/v1/, in the wire types of
// package api: fleet-wide lists (GET …/resources/{resource}) with Kubernetes-style selectors,
// cluster= and index= filters and stable paging, each answer naming the freshness of every
// cluster it spans; single objects (…/resources/{resource}/{cluster}/{namespace}/{name});
// watches with resumable positions (watch=true); and the clusters' status (…/clusters). It only
// translates: one decode, one storage.Reader or storage.Status call, one encode; errors are
// written by one function (writeError).
//
// Files: api.go (the routes: clusters, lists, gets and watches, and their encoding).
package nativeapi
