package cri

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"
)

type fakeInfo struct{ mode fs.FileMode }

func (f fakeInfo) Name() string       { return "x" }
func (f fakeInfo) Size() int64        { return 0 }
func (f fakeInfo) Mode() fs.FileMode  { return f.mode }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return f.mode.IsDir() }
func (f fakeInfo) Sys() any           { return nil }

// fakeLookup answers from maps; anything absent does not exist.
func fakeLookup(env map[string]string, files map[string]string, fileErr error, nodes map[string]fs.FileMode) Lookup {
	return Lookup{
		Getenv: func(k string) string { return env[k] },
		ReadFile: func(p string) ([]byte, error) {
			if fileErr != nil {
				return nil, fileErr
			}
			if s, ok := files[p]; ok {
				return []byte(s), nil
			}
			return nil, fs.ErrNotExist
		},
		Stat: func(p string) (fs.FileInfo, error) {
			if m, ok := nodes[p]; ok {
				return fakeInfo{m}, nil
			}
			return nil, fs.ErrNotExist
		},
		CrictlConfig: "/etc/crictl.yaml",
	}
}

func TestResolveEndpoint(t *testing.T) {
	const (
		containerd = "/run/containerd/containerd.sock"
		crio       = "/run/crio/crio.sock"
		dockerd    = "/var/run/cri-dockerd.sock"
	)
	envSet := map[string]string{EnvRuntimeEndpoint: "unix:///env.sock"}
	cfg := map[string]string{"/etc/crictl.yaml": "runtime-endpoint: unix:///cfg.sock\nimage-endpoint: unix:///img.sock\n"}
	allSockets := map[string]fs.FileMode{containerd: fs.ModeSocket, crio: fs.ModeSocket, dockerd: fs.ModeSocket}
	tests := []struct {
		name       string
		explicit   string
		env        map[string]string
		files      map[string]string
		fileErr    error
		nodes      map[string]fs.FileMode
		wantPath   string
		wantSource string
		wantErr    error  // errors.Is target
		wantErrSub string // any error containing this
	}{
		{name: "flag beats everything", explicit: "unix:///flag.sock", env: envSet, files: cfg, nodes: allSockets, wantPath: "/flag.sock", wantSource: "flag"},
		{name: "flag bare path", explicit: "/flag.sock", wantPath: "/flag.sock", wantSource: "flag"},
		{name: "flag path cleaned", explicit: "unix:///run//x/../flag.sock", wantPath: "/run/flag.sock", wantSource: "flag"},
		{name: "flag not taken for a missing socket? it is: no guessing", explicit: "unix:///missing.sock", nodes: allSockets, wantPath: "/missing.sock", wantSource: "flag"},
		{name: "env beats config and defaults", env: envSet, files: cfg, nodes: allSockets, wantPath: "/env.sock", wantSource: "env " + EnvRuntimeEndpoint},
		{name: "blank env ignored", env: map[string]string{EnvRuntimeEndpoint: "  "}, files: cfg, wantPath: "/cfg.sock", wantSource: "/etc/crictl.yaml"},
		{name: "config beats defaults", files: cfg, nodes: allSockets, wantPath: "/cfg.sock", wantSource: "/etc/crictl.yaml"},
		{name: "config without the key falls to defaults", files: map[string]string{"/etc/crictl.yaml": "timeout: 2\n"}, nodes: allSockets, wantPath: containerd, wantSource: "default"},
		{name: "unreadable config is an error", fileErr: fs.ErrPermission, nodes: allSockets, wantErr: fs.ErrPermission},
		{name: "first default: containerd", nodes: allSockets, wantPath: containerd, wantSource: "default"},
		{name: "second default: crio", nodes: map[string]fs.FileMode{crio: fs.ModeSocket, dockerd: fs.ModeSocket}, wantPath: crio, wantSource: "default"},
		{name: "third default: cri-dockerd", nodes: map[string]fs.FileMode{dockerd: fs.ModeSocket}, wantPath: dockerd, wantSource: "default"},
		{name: "a default that is not a socket is skipped", nodes: map[string]fs.FileMode{containerd: 0o644, crio: fs.ModeSocket}, wantPath: crio, wantSource: "default"},
		{name: "nothing found", wantErr: ErrNoEndpoint},
		{name: "tcp rejected", explicit: "tcp://127.0.0.1:1234", wantErrSub: "want unix:///path or /path"},
		{name: "relative rejected", explicit: "unix://run/x.sock", wantErrSub: "must be absolute"},
		{name: "bad env rejected, not skipped", env: map[string]string{EnvRuntimeEndpoint: "npipe:////./pipe/x"}, nodes: allSockets, wantErrSub: "from env"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep, err := ResolveEndpoint(tc.explicit, fakeLookup(tc.env, tc.files, tc.fileErr, tc.nodes))
			if tc.wantErr != nil || tc.wantErrSub != "" {
				if err == nil {
					t.Fatalf("got %+v, want error", ep)
				}
				if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want errors.Is %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErrSub) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErrSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ep.Path != tc.wantPath || ep.Source != tc.wantSource {
				t.Fatalf("got %+v, want path %s source %s", ep, tc.wantPath, tc.wantSource)
			}
		})
	}
}

func TestNoEndpointMessageListsDefaults(t *testing.T) {
	_, err := ResolveEndpoint("", fakeLookup(nil, nil, nil, nil))
	for _, want := range []string{"unix:///run/containerd/containerd.sock", "unix:///run/crio/crio.sock", "unix:///var/run/cri-dockerd.sock", "/etc/crictl.yaml", EnvRuntimeEndpoint} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to mention %s", err, want)
		}
	}
}

func TestCrictlRuntimeEndpoint(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"plain", "runtime-endpoint: unix:///run/a.sock\n", "unix:///run/a.sock"},
		{"double quoted", `runtime-endpoint: "unix:///run/a.sock"`, "unix:///run/a.sock"},
		{"single quoted", `runtime-endpoint: 'unix:///run/a.sock' # c`, "unix:///run/a.sock"},
		{"trailing comment", "runtime-endpoint: unix:///run/a.sock # containerd\n", "unix:///run/a.sock"},
		{"crlf", "runtime-endpoint: unix:///run/a.sock\r\n", "unix:///run/a.sock"},
		{"space before colon", "runtime-endpoint : /run/a.sock", "/run/a.sock"},
		{"among other keys", "image-endpoint: unix:///img.sock\ntimeout: 2\nruntime-endpoint: /run/a.sock\ndebug: false\n", "/run/a.sock"},
		{"commented out", "# runtime-endpoint: unix:///run/a.sock\n", ""},
		{"nested key ignored", "foo:\n  runtime-endpoint: unix:///run/a.sock\n", ""},
		{"empty value", "runtime-endpoint:\n", ""},
		{"value is a comment", "runtime-endpoint: # none\n", ""},
		{"image-endpoint only", "image-endpoint: unix:///img.sock\n", ""},
		{"last wins", "runtime-endpoint: /a.sock\nruntime-endpoint: /b.sock\n", "/b.sock"},
		{"empty file", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := crictlRuntimeEndpoint([]byte(tc.yaml)); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
