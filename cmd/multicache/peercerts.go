package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/multicache/multicache/internal/pki"
	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/storage/peer"
)

// newPeerCerts is the documented step that makes what sharded replicas prove themselves with:
// a peer CA (made once, or reused) and, per replica, a certificate whose DNS names include the
// replica's identity, for server and client use (storage/peer.Trust).
func newPeerCerts() *cobra.Command {
	var dir, caCert, caKey string
	var hosts []string
	var validity time.Duration
	cmd := &cobra.Command{
		Use:   "peer-certs [REPLICA-ID...]",
		Short: "Make the peer CA and each replica's peer certificate (sharding.peerCAFile, peerCertFile, peerKeyFile)",
		Long: `Writes into --dir: ca.crt and ca.key (a new peer CA, unless --ca-cert and --ca-key name one;
with no REPLICA-ID, only those),
and for each REPLICA-ID, REPLICA-ID.crt and REPLICA-ID.key: a certificate the CA signed for
server and client use, named REPLICA-ID (its common name and a DNS name) and any --host.
Run each replica with --replica-id REPLICA-ID (or no ID: it takes the certificate's name),
--peer-cert-file REPLICA-ID.crt, --peer-key-file REPLICA-ID.key and --peer-ca-file ca.crt.
The CA must sign peer certificates only: any certificate it signed may vouch for any user.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, ids []string) error {
			if (caCert == "") != (caKey == "") {
				return errors.New("--ca-cert and --ca-key go together")
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return fmt.Errorf("--dir: %w", err)
			}
			var ca *pki.CA
			if caCert != "" {
				c, err := os.ReadFile(caCert)
				if err != nil {
					return fmt.Errorf("--ca-cert: %w", err)
				}
				k, err := os.ReadFile(caKey)
				if err != nil {
					return fmt.Errorf("--ca-key: %w", err)
				}
				if ca, err = pki.LoadCA(c, k); err != nil {
					return fmt.Errorf("--ca-cert, --ca-key: %w", err)
				}
			} else {
				var err error
				if ca, err = pki.NewCA("multicache-peer-ca", 10*validity); err != nil {
					return err
				}
				key, err := ca.KeyPEM()
				if err != nil {
					return err
				}
				if err := write(dir, "ca.key", key); err != nil {
					return err
				}
			}
			if err := write(dir, "ca.crt", ca.PEM); err != nil {
				return err
			}
			for _, id := range ids {
				if err := shard.ValidateIdentity(id); err != nil {
					return fmt.Errorf("REPLICA-ID: %w", err)
				}
			}
			for _, id := range ids {
				req := pki.Peer(id, hosts...)
				req.Validity = validity
				c, k, err := ca.Issue(req)
				if err != nil {
					return fmt.Errorf("replica %q: %w", id, err)
				}
				if _, err := peer.NewTrust(c, k, ca.PEM, id); err != nil {
					return fmt.Errorf("replica %q: %w", id, err) // e.g. an ID that is no DNS name
				}
				if err := write(dir, id+".crt", c); err != nil {
					return err
				}
				if err := write(dir, id+".key", k); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s, %s\n", id, filepath.Join(dir, id+".crt"), filepath.Join(dir, id+".key"))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dir, "dir", ".", "directory to write the files into")
	fl.StringVar(&caCert, "ca-cert", "", "an existing peer CA's certificate (default: make a new CA)")
	fl.StringVar(&caKey, "ca-key", "", "the key of --ca-cert")
	fl.StringArrayVar(&hosts, "host", nil, "another DNS name or IP every certificate is valid for (repeatable)")
	fl.DurationVar(&validity, "validity", 365*24*time.Hour, "how long each replica's certificate is valid (the CA: ten times as long)")
	return cmd
}

func write(dir, name string, b []byte) error {
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	return nil
}
