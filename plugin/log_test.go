package plugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/eni-cni/eni-cni/netconf"
)

// The plugin's log file is capped and rotated as configured.
func TestLogFileRotates(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "eni-cni.log")
	conf := []byte(`{"cniVersion":"1.0.0","name":"pods","stateDir":"` + filepath.Join(dir, "state") + `","logFile":"` + logPath +
		`","logMaxSizeMB":0.0004,"logMaxFiles":2,"metricsFile":"off","pool":{"source":"static","ranges":["10.99.0.0/30"]}}`)
	for i := 0; i < 20; i++ {
		if err := cmdStatus(&skel.CmdArgs{StdinData: conf}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{logPath, logPath + ".1", logPath + ".2"} {
		data, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(data), "msg=STATUS") || len(data) > 1024 {
			t.Errorf("%s: %d bytes, %v", p, len(data), err)
		}
	}
	if _, err := os.Stat(logPath + ".3"); !os.IsNotExist(err) {
		t.Error("more rotated files than logMaxFiles")
	}
	for _, bad := range []string{`"logMaxSizeMB":-1`, `"logMaxFiles":0`, `"logFile":"relative.log"`} {
		if _, err := netconf.Parse([]byte(`{"name":"n",` + bad + `}`)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
