// Package index holds the cross-cluster index functions: built-ins exported by name (label,
// owner, owner UID, pod node, container image) and custom ones compiled from a JSONPath or a CEL
// expression. Every function has client-go's cache.IndexFunc signature and accepts typed
// objects, unstructured objects and, where the fields exist, metadata-only objects, so one
// index serves every cluster whatever the decoding mode.
//
// It knows objects only, as client-go's IndexFuncs do: it imports no other package of
// multicache. Where an index applies (which clusters), and the cluster and cluster+namespace
// indexes, are the aggregate's business.
//
// Files: builtin.go (the built-in index functions), custom.go (index functions from JSONPath
// and CEL), fastpath.go (plain JSONPaths walked without the JSONPath interpreter),
// celobject.go (typed objects as CEL reads them: views that convert a field when it is read),
// celnative.go (a checked CEL expression planned into Go closures over those views, as
// cel-go's interpreter would run it), filter.go (where filters: CEL predicates under a cost
// limit, evaluated untracked, natively where planned, when an estimate bounds their cost).
package index
