// Package api holds the wire types of multicache's native HTTP API (/multicache/v1/...): a list page
// and its items, a single object, a watch event, the clusters' status and errors. The server
// writes them, and the Go client (package client), the CLI and the tests read them. Resource
// versions and continue tokens are opaque strings: only the server reads their contents.
//
// Objects travel as raw JSON (json.RawMessage), exactly as the server encoded them: typed
// objects with their kind and apiVersion, CRDs as unstructured JSON, metadata-only objects as
// PartialObjectMetadata.
//
// Files: types.go (every wire type of the native API).
package api
