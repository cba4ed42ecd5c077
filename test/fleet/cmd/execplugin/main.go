// Command execplugin is a client-go exec credential plugin for tests: it hands out the exec token
// of a local fleet's cluster (test/fleet, Cluster.ExecTokenFile), so that clusters reached
// through exec plugins, as ClusterProfiles of the Cluster Inventory API are, can be tested end to
// end against a fleet.
//
// It needs provideClusterInfo: true. The cluster is named by the per-cluster exec config (a
// ClusterProfile's or kubeconfig cluster's client.authentication.k8s.io/exec extension), which
// reaches the plugin as spec.cluster.config of KUBERNETES_EXEC_INFO:
//
//	{"cluster": "fleet-1"}
//
// Flags:
//
//	--fleet-dir DIR  the fleet's directory; the token is read from DIR/<cluster>/exec-token
//	--fail MESSAGE   print MESSAGE to stderr and exit 1, as a failing plugin does
//	--log FILE       append "cluster=<name> server=<spec.cluster.server>" per invocation,
//	                 failed ones included
//
// It prints an ExecCredential of the apiVersion it was called with (client.authentication.k8s.io
// v1 or v1beta1) whose token expires in an hour. Every failure is a message on stderr and exit
// status 1.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
)

// execInfoEnv is the variable client-go passes the ExecCredential request in.
const execInfoEnv = "KUBERNETES_EXEC_INFO"

// tokenFile is the file, in the cluster's directory of the fleet, that test/fleet writes the
// exec token to (Cluster.ExecTokenFile).
const tokenFile = "exec-token"

// tokenTTL is how long client-go may reuse a token before calling the plugin again.
const tokenTTL = time.Hour

// apiVersions are those whose ExecCredential has the shape of clientauthentication/v1 in every
// field this plugin reads or writes.
var apiVersions = map[string]bool{
	"client.authentication.k8s.io/v1":      true,
	"client.authentication.k8s.io/v1beta1": true,
}

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// response is the ExecCredential printed: the request's apiVersion and kind and a status, without
// echoing the request's spec.
type response struct {
	metav1.TypeMeta `json:",inline"`
	Status          *clientauthv1.ExecCredentialStatus `json:"status"`
}

// clusterConfig is the per-cluster exec config (spec.cluster.config).
type clusterConfig struct {
	Cluster string `json:"cluster"`
}

// run is the plugin: args without the program name, env to look variables up. It returns the
// exit status; stdout receives only a successful ExecCredential.
func run(args []string, env func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("execplugin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fleetDir := fs.String("fleet-dir", "", "the fleet's directory (the cluster's is DIR/<cluster>)")
	fail := fs.String("fail", "", "print this message to stderr and exit 1")
	logFile := fs.String("log", "", "append one line per invocation to this file")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	fatal := func(err error) int {
		fmt.Fprintln(stderr, "execplugin:", err)
		return 1
	}
	if fs.NArg() > 0 {
		return fatal(fmt.Errorf("unexpected arguments %q", fs.Args()))
	}

	req, reqErr := parseRequest(env(execInfoEnv))
	if *logFile != "" {
		var name, server string
		if req != nil && req.cred.Spec.Cluster != nil {
			name, server = req.cluster, req.cred.Spec.Cluster.Server
		}
		if err := appendLog(*logFile, fmt.Sprintf("cluster=%s server=%s\n", name, server)); err != nil {
			return fatal(err)
		}
	}
	if *fail != "" {
		fmt.Fprintln(stderr, *fail)
		return 1
	}
	if reqErr != nil {
		return fatal(reqErr)
	}
	if *fleetDir == "" {
		return fatal(errors.New("--fleet-dir is required"))
	}
	path := filepath.Join(*fleetDir, req.cluster, tokenFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return fatal(fmt.Errorf("cluster %q: token of the fleet in %s: %w", req.cluster, *fleetDir, err))
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return fatal(fmt.Errorf("cluster %q: token file %s is empty", req.cluster, path))
	}
	exp := metav1.NewTime(time.Now().Add(tokenTTL))
	out, err := json.Marshal(response{
		TypeMeta: metav1.TypeMeta{APIVersion: req.cred.APIVersion, Kind: "ExecCredential"},
		Status:   &clientauthv1.ExecCredentialStatus{Token: token, ExpirationTimestamp: &exp},
	})
	if err != nil {
		return fatal(fmt.Errorf("encode ExecCredential: %w", err))
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", out); err != nil {
		return fatal(fmt.Errorf("write ExecCredential: %w", err))
	}
	return 0
}

// request is a decoded KUBERNETES_EXEC_INFO. cluster is spec.cluster.config's "cluster", set
// only when parseRequest succeeds.
type request struct {
	cred    clientauthv1.ExecCredential
	cluster string
}

// parseRequest decodes and checks KUBERNETES_EXEC_INFO. On an error after the JSON decoded, it
// also returns what it decoded, for the log line.
func parseRequest(info string) (*request, error) {
	if info == "" {
		return nil, errors.New(execInfoEnv + " is not set: run as a client-go exec credential plugin")
	}
	req := &request{}
	if err := json.Unmarshal([]byte(info), &req.cred); err != nil {
		return nil, fmt.Errorf("%s: decode ExecCredential: %w", execInfoEnv, err)
	}
	if req.cred.Kind != "ExecCredential" || !apiVersions[req.cred.APIVersion] {
		return req, fmt.Errorf("%s: want kind ExecCredential of apiVersion client.authentication.k8s.io/v1 or v1beta1, have kind %q apiVersion %q",
			execInfoEnv, req.cred.Kind, req.cred.APIVersion)
	}
	c := req.cred.Spec.Cluster
	if c == nil {
		return req, fmt.Errorf("%s: no spec.cluster: the exec config must set provideClusterInfo: true", execInfoEnv)
	}
	if len(c.Config.Raw) == 0 {
		return req, fmt.Errorf("%s: no spec.cluster.config: the cluster's client.authentication.k8s.io/exec extension must be {\"cluster\": \"<fleet cluster name>\"}", execInfoEnv)
	}
	var cfg clusterConfig
	if err := json.Unmarshal(c.Config.Raw, &cfg); err != nil {
		return req, fmt.Errorf("%s: spec.cluster.config: want {\"cluster\": \"<fleet cluster name>\"}: %w", execInfoEnv, err)
	}
	if cfg.Cluster == "" {
		return req, fmt.Errorf("%s: spec.cluster.config has no \"cluster\" (the fleet cluster's name)", execInfoEnv)
	}
	req.cluster = cfg.Cluster
	// A name is one directory of the fleet, never a path out of it.
	if cfg.Cluster != filepath.Base(cfg.Cluster) || cfg.Cluster == "." || cfg.Cluster == ".." {
		return req, fmt.Errorf("%s: spec.cluster.config: cluster %q is not a cluster name", execInfoEnv, cfg.Cluster)
	}
	return req, nil
}

func appendLog(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("--log: %w", err)
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return fmt.Errorf("--log %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--log %s: %w", path, err)
	}
	return nil
}
