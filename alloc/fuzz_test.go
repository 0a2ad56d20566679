package alloc_test

import (
	"bytes"
	"errors"
	"testing"

	. "github.com/eni-cni/eni-cni/alloc"
)

// FuzzDecodeState: any bytes either decode into a state that keeps the
// file's invariants and survives an encode/decode round trip unchanged, or
// are refused as corrupt or of an unsupported version; never a panic, never
// a silently reset state. Salvage of the same bytes yields a state that
// passes validation (repair saves it). Seeds: testdata/fuzz/FuzzDecodeState.
func FuzzDecodeState(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := DecodeState(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error is neither corrupt nor unsupported: %v", err)
			}
		} else {
			if err := st.Validate(); err != nil {
				t.Fatalf("decoded state does not validate: %v", err)
			}
			enc, err := EncodeState(st)
			if err != nil {
				t.Fatalf("encode a decoded state: %v", err)
			}
			again, err := DecodeState(enc)
			if err != nil {
				t.Fatalf("re-decode: %v\n%s", err, enc)
			}
			enc2, _ := EncodeState(again)
			if !bytes.Equal(enc, enc2) {
				t.Fatalf("round trip changed the state:\n%s\n%s", enc, enc2)
			}
		}
		salvaged, _ := Salvage(data)
		// Salvage keeps entries of both families, which a version-3 file may hold.
		salvaged.Version = SchemaVersionIPv6
		if err := salvaged.Validate(); err != nil {
			t.Fatalf("salvaged state does not validate: %v", err)
		}
		if _, err := EncodeState(salvaged); err != nil {
			t.Fatalf("encode salvaged: %v", err)
		}
	})
}
