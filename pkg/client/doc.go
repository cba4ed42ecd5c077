// Package client is a small Go client for a running multicache daemon's native HTTP API
// (package api): list with paging, get, watch with resumption, the clusters' status, and Follow,
// which keeps a caller in step with a resource the way a reflector does: list, watch from the
// list's position, resume a broken stream from the last bookmark, list again on 410 Expired.
//
// Files: client.go (Client: list, get, watch, clusters; its errors), follow.go (Follow).
package client
