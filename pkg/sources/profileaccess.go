package sources

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdlatest "k8s.io/client-go/tools/clientcmd/api/latest"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
)

// The Cluster Inventory API's access contract: a ClusterProfile's status lists access
// providers, each a name and a kubeconfig Cluster (server, CA, proxy, extensions); the consumer
// maps a provider name to an exec credential plugin in its provider file.
const (
	// ExecExtension is the Cluster extension handed to the plugin as
	// ExecCredential.spec.cluster.config (client-go's reserved name).
	ExecExtension = "client.authentication.k8s.io/exec"
	// ArgsExtension and EnvExtension carry a profile's extra plugin arguments (a list of
	// strings) and environment (a map), used as the provider's policies allow.
	ArgsExtension = "clusterprofiles.multicluster.x-k8s.io/exec/additional-args"
	EnvExtension  = "clusterprofiles.multicluster.x-k8s.io/exec/additional-envs"
)

// A provider's policies for what a profile's extensions may add to its plugin's command.
const (
	ArgsAppend = "Append" // the profile's arguments follow the provider's
	ArgsIgnore = "Ignore" // the default: the profile adds none

	EnvAppendIfNotExists = "AppendIfNotExists" // the provider's variables win
	EnvReplace           = "Replace"           // the profile's variables win
	EnvIgnore            = "Ignore"            // the default: the profile adds none
)

// AccessProvider is one entry of a provider file: the exec credential plugin that reaches the
// clusters a profile offers under Name.
type AccessProvider struct {
	Name       string                   `json:"name"`
	ExecConfig *clientcmdapi.ExecConfig `json:"execConfig"`
	// ProfileSourcedCLIArgsPolicy: ArgsAppend or ArgsIgnore (empty).
	ProfileSourcedCLIArgsPolicy string `json:"profileSourcedCLIArgsPolicy,omitempty"`
	// ProfileSourcedEnvVarsPolicy: EnvAppendIfNotExists, EnvReplace or EnvIgnore (empty).
	ProfileSourcedEnvVarsPolicy string `json:"profileSourcedEnvVarsPolicy,omitempty"`
}

// ProviderFile is the consumer's provider file, in the JSON the Cluster Inventory API's
// reference consumers read: {"providers": [{"name", "execConfig", …}]}.
type ProviderFile struct {
	Providers []AccessProvider `json:"providers"`
}

// LoadProviderFile reads and validates a provider file.
func LoadProviderFile(path string) (*ProviderFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("provider file: %w", err)
	}
	pf, err := ParseProviderFile(b)
	if err != nil {
		return nil, fmt.Errorf("provider file %s: %w", path, err)
	}
	return pf, nil
}

// ParseProviderFile decodes and validates a provider file's contents. Errors name the field:
// providers[1].execConfig.command.
func ParseProviderFile(b []byte) (*ProviderFile, error) {
	var pf ProviderFile
	if err := json.Unmarshal(b, &pf); err != nil {
		return nil, fmt.Errorf("not the provider file's JSON ({\"providers\": [{\"name\", \"execConfig\"}]}): %w", err)
	}
	var errs []error
	seen := map[string]int{}
	for i, p := range pf.Providers {
		at := fmt.Sprintf("providers[%d]", i)
		if p.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name: required", at))
		} else if j, dup := seen[p.Name]; dup {
			errs = append(errs, fmt.Errorf("%s.name: %q already named by providers[%d]", at, p.Name, j))
		} else {
			seen[p.Name] = i
		}
		switch e := p.ExecConfig; {
		case e == nil:
			errs = append(errs, fmt.Errorf("%s.execConfig: required", at))
		case e.Command == "":
			errs = append(errs, fmt.Errorf("%s.execConfig.command: required", at))
		case e.APIVersion != "client.authentication.k8s.io/v1" && e.APIVersion != "client.authentication.k8s.io/v1beta1":
			errs = append(errs, fmt.Errorf("%s.execConfig.apiVersion: %q is not client.authentication.k8s.io/v1 or v1beta1", at, e.APIVersion))
		}
		switch p.ProfileSourcedCLIArgsPolicy {
		case "", ArgsAppend, ArgsIgnore:
		default:
			errs = append(errs, fmt.Errorf("%s.profileSourcedCLIArgsPolicy: %q is not %s or %s", at, p.ProfileSourcedCLIArgsPolicy, ArgsAppend, ArgsIgnore))
		}
		switch p.ProfileSourcedEnvVarsPolicy {
		case "", EnvAppendIfNotExists, EnvReplace, EnvIgnore:
		default:
			errs = append(errs, fmt.Errorf("%s.profileSourcedEnvVarsPolicy: %q is not %s, %s or %s", at, p.ProfileSourcedEnvVarsPolicy, EnvAppendIfNotExists, EnvReplace, EnvIgnore))
		}
	}
	if len(pf.Providers) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("providers: none listed"))
	}
	return &pf, errors.Join(errs...)
}

// access chooses how to reach a profile's cluster: the first provider of the file, in the
// file's order, that the profile offers. Deprecated credentialProviders count too; an
// accessProviders entry of the same name wins over one.
func (pf *ProviderFile) access(p *clusterProfile) (*AccessProvider, *profileAccess, error) {
	offered := map[string]*profileAccess{}
	for i := range p.Status.CredentialProviders {
		offered[p.Status.CredentialProviders[i].Name] = &p.Status.CredentialProviders[i]
	}
	for i := range p.Status.AccessProviders {
		offered[p.Status.AccessProviders[i].Name] = &p.Status.AccessProviders[i]
	}
	for i := range pf.Providers {
		if a, ok := offered[pf.Providers[i].Name]; ok {
			return &pf.Providers[i], a, nil
		}
	}
	if len(offered) == 0 {
		return nil, nil, errors.New("status.accessProviders: empty: the profile offers no way to reach its cluster")
	}
	return nil, nil, fmt.Errorf("status.accessProviders: the provider file names none of the providers the profile offers: offered %q, named %q",
		slices.Sorted(maps.Keys(offered)), pf.sortedNames())
}

// restConfig builds the client config that reaches a profile's cluster through prov's plugin:
// the profile's server, CA, TLS server name and proxy; the plugin with the profile's
// client.authentication.k8s.io/exec extension as its cluster config, never interactive.
// Fields that would read the daemon's files or skip verification are refused.
func restConfig(prov *AccessProvider, a *profileAccess) (*rest.Config, error) {
	c := a.Cluster
	field := func(name string) string { return fmt.Sprintf("status.accessProviders[%q].cluster.%s", a.Name, name) }
	switch {
	case c.Server == "":
		return nil, fmt.Errorf("%s: required", field("server"))
	case c.CertificateAuthority != "":
		return nil, fmt.Errorf("%s: names a file on the consumer; publish certificate-authority-data instead", field("certificate-authority"))
	case c.InsecureSkipTLSVerify:
		return nil, fmt.Errorf("%s: not honoured; publish certificate-authority-data instead", field("insecure-skip-tls-verify"))
	}
	if u, err := url.Parse(c.Server); err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%s: %q is not an https URL (the plugin's credential must not travel in clear)", field("server"), c.Server)
	}
	cfg := &rest.Config{
		Host:               c.Server,
		DisableCompression: c.DisableCompression,
		TLSClientConfig:    rest.TLSClientConfig{CAData: c.CertificateAuthorityData, ServerName: c.TLSServerName},
	}
	if c.ProxyURL != "" {
		u, err := url.Parse(c.ProxyURL)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("%s: %q is not a URL", field("proxy-url"), c.ProxyURL)
		}
		cfg.Proxy = http.ProxyURL(u)
	}
	exec := prov.ExecConfig.DeepCopy()
	exec.InteractiveMode = clientcmdapi.NeverExecInteractiveMode
	exec.Config = nil
	// client-go converts the extensions, so that the plugin's config arrives as kubectl would
	// hand it over from a kubeconfig.
	internal := clientcmdapi.NewCluster()
	if err := clientcmdlatest.Scheme.Convert(&c, internal, nil); err != nil {
		return nil, fmt.Errorf("%s: %w", field("extensions"), err)
	}
	if ext, ok := internal.Extensions[ExecExtension]; ok {
		exec.Config = ext
	}
	for _, ext := range c.Extensions {
		var err error
		switch ext.Name {
		case ArgsExtension:
			err = addArgs(exec, ext.Extension, prov.ProfileSourcedCLIArgsPolicy)
		case EnvExtension:
			err = addEnv(exec, ext.Extension, prov.ProfileSourcedEnvVarsPolicy)
		}
		if err != nil {
			return nil, fmt.Errorf("%s[%q]: %w", field("extensions"), ext.Name, err)
		}
	}
	cfg.ExecProvider = exec
	return cfg, nil
}

func addArgs(exec *clientcmdapi.ExecConfig, raw runtime.RawExtension, policy string) error {
	if policy != ArgsAppend {
		return nil
	}
	var args []string
	if err := json.Unmarshal(raw.Raw, &args); err != nil {
		return fmt.Errorf("not a list of strings: %w", err)
	}
	exec.Args = append(exec.Args, args...)
	return nil
}

func addEnv(exec *clientcmdapi.ExecConfig, raw runtime.RawExtension, policy string) error {
	if policy != EnvAppendIfNotExists && policy != EnvReplace {
		return nil
	}
	var vars map[string]string
	if err := json.Unmarshal(raw.Raw, &vars); err != nil {
		return fmt.Errorf("not a map of strings: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		if reservedEnv(name) {
			return fmt.Errorf("variable %q: a profile may not set it (it would change what the plugin runs, loads or reaches)", name)
		}
	}
	for _, e := range exec.Env {
		if _, set := vars[e.Name]; !set || policy == EnvAppendIfNotExists {
			vars[e.Name] = e.Value
		}
	}
	exec.Env = exec.Env[:0]
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		exec.Env = append(exec.Env, clientcmdapi.ExecEnvVar{Name: name, Value: vars[name]})
	}
	return nil
}

// reservedEnv reports the variables a profile may never give the plugin: client-go hands the
// plugin the daemon's own environment with the provider's variables after it, so a profile's
// variable would override the daemon's: the program search path, the dynamic loader's, proxies,
// and client-go's own channel to the plugin.
func reservedEnv(name string) bool {
	u := strings.ToUpper(name)
	switch {
	case u == "PATH", u == "KUBERNETES_EXEC_INFO", strings.HasPrefix(u, "LD_"), strings.HasPrefix(u, "DYLD_"),
		strings.HasSuffix(u, "_PROXY"), u == "SSL_CERT_FILE", u == "SSL_CERT_DIR":
		return true
	}
	return false
}

// profileAccess is one of a profile's access providers: a name and a kubeconfig Cluster.
type profileAccess struct {
	Name    string              `json:"name"`
	Cluster clientcmdv1.Cluster `json:"cluster"`
}

// sortedNames is the providers' names, sorted.
func (pf *ProviderFile) sortedNames() []string {
	out := make([]string, 0, len(pf.Providers))
	for _, p := range pf.Providers {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out
}
