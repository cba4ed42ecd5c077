// Package pki makes the certificates replicas prove themselves to each other with: a peer CA,
// and per replica a certificate for both server and client use whose DNS names include the
// replica's identity (see storage/peer.Trust). `multicache peer-certs` and the tests use it;
// production deployments may use cert-manager instead (deploy/README.md).
//
// Files: pki.go (CA, Request, Peer and Issue).
package pki
