package netconf

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/eni-cni/eni-cni/alloc"
)

// DecodeForDel is Decode for DEL. DEL must free the attachment whatever an
// operator has done to the file since ADD: a typo in a value DEL never
// uses (logLevel "warning", a changed mtu, a cooldown below the minimum, a
// relative logFile, a bad range) would otherwise fail every DEL with code 7
// and strand every pod in Terminating. DEL needs only the network's name,
// its stateDir and what finds an unknown attachment's veth
// (hostVethPrefix); those are validated as always. Everything else that is
// wrong falls back to its default, and ignored says what was wrong, for a
// warning in the log.
func DecodeForDel(data []byte) (c *Config, ignored error, err error) {
	c, err = Decode(data)
	if err == nil || (!errors.Is(err, ErrInvalidConfig) && !errors.Is(err, ErrDecode)) {
		return c, nil, err
	}
	ignored = err
	var top map[string]json.RawMessage
	if jerr := json.Unmarshal(data, &top); jerr != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrDecode, jerr)
	}
	c = &Config{
		Raw: data, conf: &netConf{}, MTU: defaultMTU, Provider: Static, Pool: alloc.Ranges(nil),
		Cooldown: defaultCooldown, GCGrace: defaultGCGrace, LockTimeout: DefaultLockTimeout,
		VethPrefix: DefaultVethPrefix, LogMaxSize: defaultLogMaxSizeMB << 20, LogMaxFiles: defaultLogMaxFiles,
		StateDir: DefaultStateDir,
	}
	if err := c.decodeDelNeeds(top); err != nil {
		return nil, nil, err
	}
	c.PluginConf = &types.PluginConf{CNIVersion: c.CNIVersion, Name: c.Network}
	c.softDelValues(top)
	return c, ignored, nil
}

// decodeDelNeeds reads what DEL cannot do without; those errors stay errors.
func (c *Config) decodeDelNeeds(top map[string]json.RawMessage) error {
	for key, dst := range map[string]*string{"name": &c.Network, "cniVersion": &c.CNIVersion, "stateDir": &c.StateDir} {
		if raw, ok := top[key]; ok {
			if err := json.Unmarshal(raw, dst); err != nil {
				return fmt.Errorf("%w: %s: %v", ErrDecode, key, err)
			}
		}
	}
	if c.Network == "" {
		return fmt.Errorf("%w: network name is empty", ErrInvalidConfig)
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if err := checkStateDir(c.StateDir); err != nil {
		return err
	}
	c.StateDir = filepath.Clean(c.StateDir)
	if raw, ok := top["hostVethPrefix"]; ok {
		var p string
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("%w: hostVethPrefix: %v", ErrDecode, err)
		}
		if !validVethPrefix(p) {
			return fmt.Errorf("%w: hostVethPrefix %q must be 1-5 lowercase letters or digits, starting with a letter", ErrInvalidConfig, p)
		}
		c.VethPrefix = p
	}
	return nil
}

// softDelValues takes the values DEL can use when they are valid (where
// to log, the pool's source, the cooldown its release starts) and leaves
// the default for each that is not.
func (c *Config) softDelValues(top map[string]json.RawMessage) {
	var s string
	if soft(top, "logFile", &s) && filepath.IsAbs(s) {
		c.LogFile = s
	}
	if soft(top, "logLevel", &s) {
		switch strings.ToLower(s) {
		case "debug", "info", "warn", "error":
			c.LogLevel = s
		}
	}
	if soft(top, "metricsFile", &s) && (s == metricsOff || filepath.IsAbs(s)) {
		c.MetricsFile = s
	}
	var pool struct {
		Source string `json:"source"`
	}
	if soft(top, "pool", &pool); pool.Source != Static {
		c.Provider, c.Pool = EC2, alloc.StoredPool{}
	}
	var secs float64
	if soft(top, "cooldownSeconds", &secs) {
		if d, err := seconds("cooldownSeconds", &secs, defaultCooldown); err == nil && d >= minCooldown {
			c.Cooldown = d
		}
	}
}

// soft decodes top[key] into dst, reporting whether it was there and valid.
func soft(top map[string]json.RawMessage, key string, dst any) bool {
	raw, ok := top[key]
	return ok && json.Unmarshal(raw, dst) == nil
}
