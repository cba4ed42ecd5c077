// Package kubeapi is the Kubernetes API's front, read-only: at the root (the fleet view) and
// under /clusters/{name} (one cluster's view), the objects of every cached resource (lists,
// gets, watches and watch-lists, as objects, PartialObjectMetadata or Tables with a CLUSTER
// column), clusters.multicache.io and the custom resources' definitions, with discovery,
// OpenAPI and the self reviews of package discovery. It only translates: it decodes a request
// once (its path, its query through the ParameterCodec, its Accept header), makes one call of a
// storage.Reader or storage.Status, and encodes the answer once; the reader's refusals are
// written by one function (writeError). Objects a peer encoded are written as they are.
//
// Files: api.go (the request's decoding and routing, errors and warnings), path.go (paths),
// negotiate.go (the Accept header), objects.go (lists, gets and watches of cached resources),
// encode.go (the encodings, which peers encode with too), clusters.go
// (clusters.multicache.io), definitions.go (customresourcedefinitions), events.go (watch
// events' objects encoded once for every watch that writes them).
package kubeapi
