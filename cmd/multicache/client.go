package main

import (
	"context"
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
	server, token string
	hc            *http.Client
}

func addClientFlags(cmd *cobra.Command, c *client) {
	def := os.Getenv("MULTICACHE_SERVER")
	if def == "" {
		def = "http://127.0.0.1:8080"
	}
	cmd.Flags().StringVar(&c.server, "server", def, "daemon URL ($MULTICACHE_SERVER)")
	cmd.Flags().StringVar(&c.token, "token", os.Getenv("MULTICACHE_TOKEN"), "bearer token ($MULTICACHE_TOKEN)")
}

type apiErr struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (c *client) get(ctx context.Context, path string, q url.Values, out any) error {
	if c.hc == nil {
		c.hc = &http.Client{Timeout: 60 * time.Second}
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
	resp, err := c.hc.Do(req)
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
