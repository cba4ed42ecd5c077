package fleet

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ExecUser is the user name (and uid) the static exec token authenticates as. It is in group
// system:masters, so it needs no RBAC.
const ExecUser = "fleet-exec"

const (
	// execTokenName is the plain token, read by the exec credential plugin of
	// test/fleet/cmd/execplugin as <fleet dir>/<cluster>/exec-token: the two must agree.
	execTokenName = "exec-token"
	// execTokenCSV is kube-apiserver's --token-auth-file, derived from execTokenName.
	execTokenCSV = "exec-tokens.csv"
	// execTokenBytes is the token's entropy; it is written hex-encoded.
	execTokenBytes = 32
)

// ExecTokenFile is the path of the file holding the cluster's exec token: a static bearer token
// (user ExecUser, group system:masters) that the cluster's kube-apiserver accepts through
// --token-auth-file. It stands for the credential an exec credential plugin hands out, as
// clusters reached through plugins (ClusterProfiles of the Cluster Inventory API) are: the test
// plugin test/fleet/cmd/execplugin reads it from here. It never changes during the cluster's
// life, restarts included.
func (c *Cluster) ExecTokenFile() string { return filepath.Join(c.Dir, execTokenName) }

// ExecToken reads the cluster's exec token (see ExecTokenFile).
func (c *Cluster) ExecToken() (string, error) {
	tok, err := readExecToken(c.ExecTokenFile())
	if err != nil {
		return "", fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	return tok, nil
}

// CACertFile is the path of the PEM certificate of the CA that signed the API server's serving
// certificate (and the client certificates it accepts).
func (c *Cluster) CACertFile() string { return c.pki().CACert }

// execTokenCSVFile is the path of kube-apiserver's --token-auth-file.
func (c *Cluster) execTokenCSVFile() string { return filepath.Join(c.Dir, execTokenCSV) }

// ensureExecToken creates the exec token if the cluster has none yet and (re)writes the
// API server's token file from it. The token of an existing cluster is kept, so the file the
// API server reads at each start always names the token ExecToken returns.
func (c *Cluster) ensureExecToken() error {
	tok, err := readExecToken(c.ExecTokenFile())
	if errors.Is(err, os.ErrNotExist) {
		b := make([]byte, execTokenBytes)
		if _, err := rand.Read(b); err != nil {
			return fmt.Errorf("cluster %q: exec token: %w", c.Name, err)
		}
		tok = hex.EncodeToString(b)
		if err := writeAtomic(c.ExecTokenFile(), []byte(tok+"\n")); err != nil {
			return fmt.Errorf("cluster %q: exec token: %w", c.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	// kube-apiserver's static token file: token,user,uid,"group1,group2".
	line := fmt.Sprintf("%s,%s,%s,%q\n", tok, ExecUser, ExecUser, "system:masters")
	if err := writeAtomic(c.execTokenCSVFile(), []byte(line)); err != nil {
		return fmt.Errorf("cluster %q: token auth file: %w", c.Name, err)
	}
	return nil
}

// readExecToken reads a token file and checks that it holds one hex token of the expected size,
// so that a damaged file fails here rather than as a 401 later.
func readExecToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("exec token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if _, err := hex.DecodeString(tok); err != nil || len(tok) != 2*execTokenBytes {
		return "", fmt.Errorf("exec token %s: want %d hex digits, have %d characters that are not", path, 2*execTokenBytes, len(tok))
	}
	return tok, nil
}
