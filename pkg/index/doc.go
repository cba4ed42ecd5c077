// Package index holds the cross-cluster index functions: built-ins exported by name (namespace,
// label, owner, pod node, container image) and custom ones compiled from a JSONPath or a CEL
// expression. Every function has client-go's cache.IndexFunc signature and accepts typed
// objects, unstructured objects and, where the fields exist, metadata-only objects, so one
// index serves every cluster whatever the decoding mode.
//
// The cluster and cluster+namespace indexes need no function: package aggregate answers them
// from its membership (aggregate.IndexCluster, aggregate.IndexClusterNamespace).
package index
