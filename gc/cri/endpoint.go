package cri

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrNoEndpoint means no CRI endpoint was configured and none of the default
// sockets exists.
var ErrNoEndpoint = errors.New("no cri endpoint")

const (
	// EnvRuntimeEndpoint is the variable crictl and kubelet tooling read.
	EnvRuntimeEndpoint = "CONTAINER_RUNTIME_ENDPOINT"
	// DefaultCrictlConfig is where crictl keeps its configuration.
	DefaultCrictlConfig = "/etc/crictl.yaml"
)

// defaultEndpoints are probed in this order, as crictl does, when nothing is
// configured.
func defaultEndpoints() []string {
	return []string{
		"unix:///run/containerd/containerd.sock",
		"unix:///run/crio/crio.sock",
		"unix:///var/run/cri-dockerd.sock",
	}
}

// Endpoint is a resolved CRI socket and where the choice came from, so error
// messages can tell the operator which setting to fix.
type Endpoint struct {
	Path   string // absolute socket path
	Source string // "flag", "env CONTAINER_RUNTIME_ENDPOINT", "<crictl.yaml path>" or "default"
}

// String returns the endpoint in crictl's unix:// form.
func (e Endpoint) String() string { return "unix://" + e.Path }

// Lookup holds the side effects of endpoint resolution so tests need no real
// files or environment. A nil field falls back to the os package; an empty
// CrictlConfig means DefaultCrictlConfig.
type Lookup struct {
	Getenv       func(string) string
	ReadFile     func(string) ([]byte, error)
	Stat         func(string) (fs.FileInfo, error)
	CrictlConfig string
}

func (lk Lookup) withDefaults() Lookup {
	if lk.Getenv == nil {
		lk.Getenv = os.Getenv
	}
	if lk.ReadFile == nil {
		lk.ReadFile = os.ReadFile
	}
	if lk.Stat == nil {
		lk.Stat = os.Stat
	}
	if lk.CrictlConfig == "" {
		lk.CrictlConfig = DefaultCrictlConfig
	}
	return lk
}

// ResolveEndpoint picks the CRI socket like crictl: explicit (the
// --cri-endpoint flag) > $CONTAINER_RUNTIME_ENDPOINT > runtime-endpoint in
// crictl.yaml > the first default socket that exists. A configured endpoint is
// taken as is, even if its socket is missing: guessing another runtime behind
// the operator's back could list the wrong sandboxes. Only unix sockets are
// supported, as unix:///path or /path.
func ResolveEndpoint(explicit string, lk Lookup) (Endpoint, error) {
	lk = lk.withDefaults()
	if explicit != "" {
		return configured(explicit, "flag")
	}
	if v := strings.TrimSpace(lk.Getenv(EnvRuntimeEndpoint)); v != "" {
		return configured(v, "env "+EnvRuntimeEndpoint)
	}
	data, err := lk.ReadFile(lk.CrictlConfig)
	switch {
	case err == nil:
		if v := crictlRuntimeEndpoint(data); v != "" {
			return configured(v, lk.CrictlConfig)
		}
	case !errors.Is(err, fs.ErrNotExist):
		// An unreadable config may name a runtime other than the defaults;
		// falling through could list the wrong runtime.
		return Endpoint{}, fmt.Errorf("read cri config %s: %w", lk.CrictlConfig, err)
	}
	defaults := defaultEndpoints()
	for _, d := range defaults {
		p, _ := SocketPath(d)
		if fi, err := lk.Stat(p); err == nil && fi.Mode()&fs.ModeSocket != 0 {
			return Endpoint{Path: p, Source: "default"}, nil
		}
	}
	return Endpoint{}, fmt.Errorf("%w: --cri-endpoint, $%s and runtime-endpoint in %s are unset and none of %s is a socket",
		ErrNoEndpoint, EnvRuntimeEndpoint, lk.CrictlConfig, strings.Join(defaults, ", "))
}

func configured(ep, source string) (Endpoint, error) {
	p, err := SocketPath(ep)
	if err != nil {
		return Endpoint{}, fmt.Errorf("cri endpoint from %s: %w", source, err)
	}
	return Endpoint{Path: p, Source: source}, nil
}

// SocketPath turns unix:///path or /path into a clean absolute path.
func SocketPath(ep string) (string, error) {
	p, ok := strings.CutPrefix(ep, "unix://")
	if !ok && !strings.HasPrefix(ep, "/") {
		return "", fmt.Errorf("parse endpoint %q: want unix:///path or /path", ep)
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("parse endpoint %q: socket path must be absolute", ep)
	}
	return filepath.Clean(p), nil
}

// crictlRuntimeEndpoint reads the top-level runtime-endpoint key of a
// crictl.yaml. crictl's file is a flat map of scalars, so a line parser is
// enough and keeps a YAML module out of the binary. Returns "" if unset.
func crictlRuntimeEndpoint(data []byte) string {
	v := ""
	for _, line := range strings.Split(string(data), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok || strings.TrimRight(key, " \t") != "runtime-endpoint" {
			continue // also skips indented (nested) keys and comments
		}
		v = yamlScalar(val) // the last one wins, as in YAML decoders that allow duplicates
	}
	return v
}

// yamlScalar strips whitespace, a trailing comment and matching quotes.
func yamlScalar(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') {
		if end := strings.IndexByte(s[1:], s[0]); end >= 0 {
			return s[1 : 1+end]
		}
	}
	if i := strings.Index(s, " #"); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, "\t#"); i >= 0 {
		s = s[:i]
	}
	if strings.HasPrefix(s, "#") {
		return ""
	}
	return strings.TrimSpace(s)
}
