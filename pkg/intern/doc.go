// Package intern owns structural sharing between cached objects: repeated parts of typed
// objects (label and annotation maps, container resource lists, toleration lists, empty
// security contexts and low-cardinality strings such as images and namespaces) are replaced by
// one canonical copy, so a fleet of near-identical Pods pays for each part once.
//
// Invariant: a canonical part is reachable from many cached objects at once. Cached objects
// are read-only (the client-go informer contract, enforced in tests by
// KUBE_CACHE_MUTATION_DETECTOR), so sharing is invisible to readers; a caller that needs to
// modify an object must DeepCopy it first, as with any informer cache.
//
// Files: intern.go (the string table and what it interns in objects).
package intern
