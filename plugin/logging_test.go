package plugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
)

// The one log line of a verb names the attachment and the outcome; it
// never carries the configuration from stdin (which may hold other
// plugins' settings, or a runtime's secrets in runtimeConfig).
func TestVerbLogHasNoStdin(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "log")
	conf := `{"cniVersion":"1.0.0","name":"pods","type":"eni-cni","stateDir":"` + dir + `/state","logFile":"` + logFile +
		`","pool":{"source":"static","ranges":["10.99.0.0/30"]},"runtimeConfig":{"secret":"s3cr3t-token"},"prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.99.0.1/32"}]}}`
	if err := cmdStatus(&skel.CmdArgs{StdinData: []byte(conf)}); err != nil {
		t.Fatalf("STATUS: %v", err)
	}
	b, err := os.ReadFile(logFile)
	if err != nil || !strings.Contains(string(b), "STATUS") {
		t.Fatalf("log: %v %q", err, b)
	}
	if strings.Contains(string(b), "s3cr3t") || strings.Contains(string(b), "runtimeConfig") {
		t.Errorf("the log carries stdin: %q", b)
	}
}
