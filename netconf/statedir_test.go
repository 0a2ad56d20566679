package netconf

import (
	"errors"
	"testing"
)

// TestStateDirOf: the light decode the lean build uses to find its cached
// build gives the state directory Decode gives, with the same default,
// cleaning and refusals.
func TestStateDirOf(t *testing.T) {
	for _, c := range []struct {
		name, conf, want string
		err              error
	}{
		{"named", `{"cniVersion":"1.0.0","name":"n","type":"eni-cni","stateDir":"/var/lib/a/../b/"}`, "/var/lib/b", nil},
		{"default", `{"cniVersion":"1.0.0","name":"n","type":"eni-cni"}`, DefaultStateDir, nil},
		{"relative", `{"name":"n","type":"eni-cni","stateDir":"var/lib/x"}`, "", ErrInvalidConfig},
		{"root", `{"name":"n","type":"eni-cni","stateDir":"/./"}`, "", ErrInvalidConfig},
		{"not json", `{"name":`, "", ErrDecode},
	} {
		got, err := StateDirOf([]byte(c.conf))
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("%s: StateDirOf = %q, %v; want %q, %v", c.name, got, err, c.want, c.err)
		}
	}
}

// FuzzStateDirOf: wherever the plugin's configuration decodes, the light
// decode agrees with it, so the lean build looks for its cached build
// beside the state the command will use.
func FuzzStateDirOf(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"eni-cni","stateDir":"/var/lib/x"}]}`))
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"n","type":"eni-cni","StateDir":"/a","stateDir":"/b"}`))
	f.Add([]byte(`{"name":"n","plugins":[{"type":"eni-cni","stateDir":"/a"},{"type":"eni-cni","stateDir":"/b"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		conf, err := PluginConfFrom(data)
		if err != nil {
			return
		}
		c, err := Decode(conf)
		if err != nil {
			return
		}
		got, err := StateDirOf(conf)
		if err != nil || got != c.StateDir {
			t.Fatalf("StateDirOf = %q, %v; Decode gives %q", got, err, c.StateDir)
		}
	})
}
