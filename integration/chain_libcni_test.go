package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// nsExec is libcni's plugin executor, running each plugin inside the node
// namespace through nsenter so that plugins act on the node the test made,
// never on the machine's root namespace.
type nsExec struct {
	nodePath string
	version.PluginDecoder
}

func (e *nsExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+e.nodePath, "--", pluginPath)
	cmd.Env = environ
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		// As invoke.RawExec: a failing plugin's stdout is its CNI error.
		var cniErr types.Error
		if json.Unmarshal(stdout.Bytes(), &cniErr) == nil && (cniErr.Code != 0 || cniErr.Msg != "") {
			return nil, &cniErr
		}
		return nil, fmt.Errorf("%s: %v (stdout %q, stderr %q)", pluginPath, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

func (e *nsExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

// libcniChain drives the conflist with libcni, as containerd and CRI-O do.
type libcniChain struct {
	cni  *libcni.CNIConfig
	list *libcni.NetworkConfigList
}

func newChainRunner(t *testing.T, n *node, binDir string, conflist map[string]any) chainRunner {
	t.Helper()
	b, err := json.Marshal(conflist)
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatalf("parse conflist: %v\n%s", err, b)
	}
	return &libcniChain{
		cni:  libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), &nsExec{nodePath: n.path()}),
		list: list,
	}
}

func runtimeConf(p *pod) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: p.containerID,
		NetNS:       p.path(),
		IfName:      p.ifName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.namespace},
			{"K8S_POD_NAME", p.name}, {"K8S_POD_UID", p.uid},
		},
		CapabilityArgs: map[string]any{"portMappings": portMappings},
	}
}

func (c *libcniChain) add(t *testing.T, p *pod) *current.Result {
	t.Helper()
	r, err := c.cni.AddNetworkList(t.Context(), c.list, runtimeConf(p))
	if err != nil {
		t.Fatalf("libcni AddNetworkList: %v", err)
	}
	res, err := current.NewResultFromResult(r)
	if err != nil {
		t.Fatalf("libcni AddNetworkList result: %v", err)
	}
	return res
}

func (c *libcniChain) check(t *testing.T, p *pod) error {
	return c.cni.CheckNetworkList(t.Context(), c.list, runtimeConf(p))
}

func (c *libcniChain) del(t *testing.T, p *pod) error {
	return c.cni.DelNetworkList(t.Context(), c.list, runtimeConf(p))
}
