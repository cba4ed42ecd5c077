package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/multicache/multicache/pkg/client"
)

// clientFlags reach a running daemon.
type clientFlags struct {
	server, token, caFile string
}

func addClientFlags(cmd *cobra.Command, f *clientFlags) {
	def := os.Getenv("MULTICACHE_SERVER")
	if def == "" {
		def = "http://127.0.0.1:8080"
	}
	cmd.Flags().StringVar(&f.server, "server", def, "daemon URL ($MULTICACHE_SERVER)")
	cmd.Flags().StringVar(&f.token, "token", os.Getenv("MULTICACHE_TOKEN"), "bearer token ($MULTICACHE_TOKEN)")
	cmd.Flags().StringVar(&f.caFile, "certificate-authority", os.Getenv("MULTICACHE_CA_FILE"),
		"PEM file of the CA that signed an https daemon's certificate ($MULTICACHE_CA_FILE); default: the system roots")
}

// client builds the client; a bad flag is named in the error.
func (f *clientFlags) client() (*client.Client, error) {
	c, err := client.New(client.Options{Server: f.server, Token: f.token, CAFile: f.caFile})
	var oe *client.OptionError
	if errors.As(err, &oe) {
		flag := map[string]string{"Server": "--server", "CAFile": "--certificate-authority"}[oe.Option]
		return nil, fmt.Errorf("%s: %w", flag, oe.Err)
	}
	return c, err
}
