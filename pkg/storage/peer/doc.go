// Package peer is how one replica reaches another: who a peer is (Trust: each replica's
// certificate names it, and a peer Lease counts only once its URL proves that), and the HTTP
// clients of calls to peers (Clients), which reach only the replica a fence names and never
// carry a token.
//
// Files: envelope.go (the envelope's frames), version.go (its versions: the one this release
// speaks and the previous release's, which it answers and calls in during a rolling update),
// client.go (Client: the Reader and Status of another replica), handler.go (Handler: this
// replica's part, as the envelope serves it), relay.go (the OpenAPI relay), handover.go
// (Handovers: taking a cluster's state from its last owner), trust.go (Trust and Clients).
package peer
