// Package storage is the fleet's read contract, free of HTTP: what a list, a get or a watch of
// cached objects asks (typed options) and what it answers (typed results), and the errors it
// answers with (errors.go: every one an *apierrors.StatusError, which a front writes as it is).
// The API fronts (package kubeapi, package nativeapi) decode a request once, call one Reader
// and encode once; they cannot tell which Reader they hold:
//   - storage/local reads this replica's Registry, aggregates and watch caches;
//   - storage/peer reads another replica's, over one internal envelope;
//   - storage/fanout reads the fleet from the owners of its clusters, any Reader each.
//
// Status answers what replicas say of their clusters (their state, and the definitions of the
// custom resources they serve), for the clusters endpoints and the definitions.
//
// Items carry their object, or the bytes an owner encoded it as (Raw, in the Encoding the
// request named), which are written as they are: no item is encoded twice, and a peer's item
// is never decoded. Positions (resourceVersions and continue tokens) are package watchcache's.
//
// Files: reader.go (Reader, Status, the options and results), errors.go (the errors),
// encoding.go (Encoding and Encoder), selection.go (what a selection's label selector says of
// clusters), buffers.go (the pool of encoding buffers), summary.go (Summarizer: counts in
// groups), summarywatch.go (WatchSummary: a summary that streams), sort.go (the order of
// sorted lists, and counts), scope.go (a request's read scope: what its reads share, such as
// one read of this replica's status of its clusters).
package storage
