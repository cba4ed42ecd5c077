package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// client talks to a running daemon.
type client struct {
	server, token, caFile string
	hc                    *http.Client
}

func addClientFlags(cmd *cobra.Command, c *client) {
	def := os.Getenv("MULTICACHE_SERVER")
	if def == "" {
		def = "http://127.0.0.1:8080"
	}
	cmd.Flags().StringVar(&c.server, "server", def, "daemon URL ($MULTICACHE_SERVER)")
	cmd.Flags().StringVar(&c.token, "token", os.Getenv("MULTICACHE_TOKEN"), "bearer token ($MULTICACHE_TOKEN)")
	cmd.Flags().StringVar(&c.caFile, "certificate-authority", os.Getenv("MULTICACHE_CA_FILE"),
		"PEM file of the CA that signed an https daemon's certificate ($MULTICACHE_CA_FILE); default: the system roots")
}

// httpClient builds the client once: the system roots, or only --certificate-authority's.
func (c *client) httpClient() (*http.Client, error) {
	if c.hc != nil {
		return c.hc, nil
	}
	hc := &http.Client{Timeout: 60 * time.Second}
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return nil, fmt.Errorf("--certificate-authority: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--certificate-authority %q: no PEM certificate in it", c.caFile)
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		hc.Transport = t
	}
	c.hc = hc
	return hc, nil
}

type apiErr struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (c *client) get(ctx context.Context, path string, q url.Values, out any) error {
	hc, err := c.httpClient()
	if err != nil {
		return err
	}
	u := strings.TrimSuffix(c.server, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("--server %q: %w", c.server, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("daemon at %s: %w", c.server, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e apiErr
		if json.Unmarshal(b, &e) == nil && e.Message != "" {
			return fmt.Errorf("%s (%d): %s", e.Reason, e.Code, e.Message)
		}
		return fmt.Errorf("daemon at %s: %s", c.server, resp.Status)
	}
	return json.Unmarshal(b, out)
}
