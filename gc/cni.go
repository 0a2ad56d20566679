package gc

import (
	"encoding/json"
	"fmt"
)

// ValidAttachmentsFromConfig reads the valid attachments from the network
// configuration the runtime passes to the CNI GC verb on stdin:
// cni.dev/valid-attachments, else cni.dev/attachments (the name the spec
// text once used; libcni sends both, containernetworking/cni#1101). A key that is absent or null means none, which
// for the GC verb legitimately means "free every old attachment of this
// network".
func ValidAttachmentsFromConfig(conf []byte) ([]ValidAttachment, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(conf, &keys); err != nil {
		return nil, fmt.Errorf("decode gc network config: %w", err)
	}
	for _, k := range []string{"cni.dev/valid-attachments", "cni.dev/attachments"} {
		raw, ok := keys[k]
		if !ok {
			continue
		}
		var va []ValidAttachment
		if err := json.Unmarshal(raw, &va); err != nil {
			return nil, fmt.Errorf("decode %s: %w", k, err)
		}
		return va, nil
	}
	return nil, nil
}
