package alloc

import (
	"encoding/json"
	"fmt"
)

// migrations[v] turns the JSON document of a version-v state file into
// version v+1. Each works on the generic form and names the fields of the
// versions it converts between, frozen here: the Go types move on, the
// files on disk do not. Add one with every SchemaVersion bump, with a
// fixture of the old version in testdata/ (see migrate_test.go).
var migrations = map[int]func(doc map[string]json.RawMessage) error{
	1: migrateV1toV2,
}

// migrate brings the bytes of a version-from file to SchemaVersion.
func migrate(data []byte, from int) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	for v := from; v < SchemaVersion; v++ {
		step, ok := migrations[v]
		if !ok {
			return nil, fmt.Errorf("%w: no migration from version %d", ErrUnsupportedVersion, v)
		}
		if err := step(doc); err != nil {
			return nil, fmt.Errorf("%w: migrate version %d to %d: %v", ErrCorrupt, v, v+1, err)
		}
		doc["version"] = json.RawMessage(fmt.Sprint(v + 1))
	}
	return json.Marshal(doc)
}

// migrateV1toV2 moves version 1's ec2 data, split between "pool" (the
// addresses, with "unusable") and the opaque "source" (instance, limits,
// ENIs, tombstones, dirty), into the one section "ec2".
//
// Version 1 did not record where an address came from. Each becomes
// "found", which is never given back, and the section is marked dirty: the
// first `warm` pass reads EC2, learns which ENIs eni-cni created (their
// addresses become "assigned") and which carry no_manage. Until then the
// addresses stay in use, as version 1 used them.
func migrateV1toV2(doc map[string]json.RawMessage) error {
	rawPool, rawSource := doc["pool"], doc["source"]
	delete(doc, "pool")
	delete(doc, "source")
	if isNull(rawPool) && isNull(rawSource) {
		return nil // a static-pool node, or ec2 that never ran warm
	}
	sec := map[string]json.RawMessage{}
	if !isNull(rawSource) {
		if err := json.Unmarshal(rawSource, &sec); err != nil {
			return fmt.Errorf("source: %v", err)
		}
	}
	var addrs []map[string]json.RawMessage
	if !isNull(rawPool) {
		if err := json.Unmarshal(rawPool, &addrs); err != nil {
			return fmt.Errorf("pool: %v", err)
		}
	}
	for _, a := range addrs {
		a["origin"] = json.RawMessage(`"found"`)
	}
	if addrs == nil {
		addrs = []map[string]json.RawMessage{}
	}
	b, err := json.Marshal(addrs)
	if err != nil {
		return err
	}
	sec["addrs"] = b
	if _, ok := sec["enis"]; !ok {
		sec["enis"] = json.RawMessage(`[]`)
	}
	sec["dirty"] = json.RawMessage(`true`)
	if doc["ec2"], err = json.Marshal(sec); err != nil {
		return err
	}
	return nil
}

func isNull(m json.RawMessage) bool { return len(m) == 0 || string(m) == "null" }
