// Package discovery is what the Kubernetes API says of itself: the catalog of the resources it
// serves, in the fleet view and each cluster's (catalog.go, built from how the clusters serve
// the configured resources), the discovery documents, legacy and aggregated (aggregated.go),
// the OpenAPI v3 and v2 documents, read from the member clusters that serve each group-version
// (openapi.go, openapiv2.go), and the self reviews that clients ask before they show a view
// (selfreview.go). Errors are written by one function (writeError, in aggregated.go).
package discovery
