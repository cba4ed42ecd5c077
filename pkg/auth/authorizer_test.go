package auth

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
)

// TestTokens: a listed bearer token reads everything, as TokenHolder; a missing, malformed or
// unlisted one is unauthenticated, with a message that says which.
func TestTokens(t *testing.T) {
	toks := Tokens{"first", "second"}
	for _, tc := range []struct {
		header string
		ok     bool
		msg    string
	}{
		{"Bearer second", true, ""},
		{"Bearer first", true, ""},
		{"", false, "missing bearer token"},
		{"Basic Zm9vOmJhcg==", false, "missing bearer token"},
		{"Bearer ", false, "missing bearer token"},
		{"Bearer third", false, "invalid bearer token"},
		{"Bearer firs", false, "invalid bearer token"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		a, err := toks.Authorize(r)
		if !tc.ok {
			if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%q: err = %v, want unauthenticated: %s", tc.header, err, tc.msg)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.header, err)
		}
		all, err := a.All(context.Background())
		sec, _ := a.Cluster(context.Background(), "any", true)
		if !all || !sec || err != nil {
			t.Errorf("%q: All %v, Secrets %v, %v; want everything", tc.header, all, sec, err)
		}
		if u := UserOf(a); u == nil || u.GetName() != TokenHolder.GetName() {
			t.Errorf("%q: UserOf = %v, want the token holder", tc.header, u)
		}
	}
	// What a peer vouches for in token mode reads everything too, as the token holder.
	a := toks.AccessFor(&user.DefaultInfo{Name: "someone"})
	if all, _ := a.All(context.Background()); !all || UserOf(a) != TokenHolder {
		t.Errorf("AccessFor: All %v, user %v", all, UserOf(a))
	}
	// With auth off the caller reads everything and is nobody to peers.
	if all, _ := (Everything{}).All(context.Background()); !all || UserOf(Everything{}) != nil {
		t.Error("Everything must read everything and name no user")
	}
	if !slices.Contains(TokenHolder.GetGroups(), user.AllAuthenticated) {
		t.Errorf("TokenHolder's groups %v lack %s", TokenHolder.GetGroups(), user.AllAuthenticated)
	}
}

// TestReadTokenFile: one token per line; blank lines and comments are skipped; a file without
// a token, or no file, is an error that names it.
func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := ReadTokenFile(write("ok", "# ops\n  alpha  \n\nbeta\n# old: gamma\n"))
	if err != nil || !slices.Equal(got, []string{"alpha", "beta"}) {
		t.Errorf("ReadTokenFile = %q, %v", got, err)
	}
	empty := write("empty", "# nothing\n\n")
	if _, err := ReadTokenFile(empty); err == nil || !strings.Contains(err.Error(), empty) {
		t.Errorf("a file without tokens: %v, want an error naming it", err)
	}
	if _, err := ReadTokenFile(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "token file") {
		t.Errorf("a missing file: %v", err)
	}
}
