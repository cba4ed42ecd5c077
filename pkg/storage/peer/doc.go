// Package peer is how one replica reaches another: who a peer is (Trust: each replica's
// certificate names it, and a peer Lease counts only once its URL proves that), and the HTTP
// clients of calls to peers (Clients), which reach only the replica a fence names and never
// carry a token.
package peer
