package plugin

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzParseCNIArgs: CNI_ARGS either parses into keys and values the
// plugin can record (non-empty keys; values short and without control
// characters) or is a code 4 error. Seeds: testdata/fuzz/FuzzParseCNIArgs.
func FuzzParseCNIArgs(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		kv, err := parseCNIArgs(s)
		if err != nil {
			if code := toCNIError(err).Code; code != 4 {
				t.Fatalf("CNI_ARGS error with code %d: %v", code, err)
			}
			return
		}
		for k, v := range kv {
			if k == "" || strings.ContainsAny(k, "=;") {
				t.Fatalf("key %q", k)
			}
			if len(v) > 253 || !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl) || strings.Contains(v, ";") {
				t.Fatalf("value %q of %s", v, k)
			}
		}
	})
}
