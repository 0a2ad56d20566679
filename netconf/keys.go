package netconf

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// runtimeKeys are keys a runtime or libcni puts into a plugin's entry that
// the config struct does not declare: CNI_ARGS-style "args", the
// capabilities' "runtimeConfig" and the GC verb's attachment lists.
var runtimeKeys = []string{"args", "runtimeConfig", "cni.dev/attachments", "cni.dev/valid-attachments"}

// ErrUnknownKey marks a key the plugin entry may not have: almost always a
// typo ("warmIPTargt") that would otherwise silently leave the default in
// force.
var ErrUnknownKey = fmt.Errorf("%w: unknown key", ErrInvalidConfig)

// knownKeys lists the JSON keys of a struct type, following embedded
// structs as encoding/json does. It is derived from the struct so that a
// key added to netConf is accepted the moment it exists.
func knownKeys(t reflect.Type) map[string]bool {
	keys := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			for k := range knownKeys(ft) {
				keys[k] = true
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		keys[name] = true
	}
	return keys
}

// CheckKeys rejects keys of the plugin entry, and of its "pool" object,
// that the configuration does not know.
func CheckKeys(data []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil // the typed decode reports it
	}
	known := knownKeys(typeOfNetConf())
	for _, k := range runtimeKeys {
		known[k] = true
	}
	var unknown []string
	for k := range top {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if raw, ok := top["pool"]; ok {
		var pool map[string]json.RawMessage
		if json.Unmarshal(raw, &pool) == nil {
			poolKnown := knownKeys(reflect.TypeOf(poolConf{}))
			for k := range pool {
				if !poolKnown[k] {
					unknown = append(unknown, "pool."+k)
				}
			}
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	msgs := make([]string, len(unknown))
	for i, k := range unknown {
		msgs[i] = fmt.Sprintf("%q", k)
		set := known
		base := k
		if rest, ok := strings.CutPrefix(k, "pool."); ok {
			set, base = knownKeys(reflect.TypeOf(poolConf{})), rest
		}
		if s := closest(base, set); s != "" {
			msgs[i] += fmt.Sprintf(" (did you mean %q?)", s)
		}
	}
	return fmt.Errorf("%w %s in the %s plugin entry", ErrUnknownKey, strings.Join(msgs, ", "), PluginType)
}

// closest returns the known key nearest to k when it is near enough to be
// a likely typo (case differences, a letter or two).
func closest(k string, known map[string]bool) string {
	best, bestD := "", 3
	for c := range known {
		d := editDistance(strings.ToLower(k), strings.ToLower(c))
		if d < bestD || (d == bestD && best != "" && c < best) {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func typeOfNetConf() reflect.Type { return reflect.TypeOf(netConf{}) }
