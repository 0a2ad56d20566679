// Package faultscan finds the crash points (fault.Point call sites) in the
// source, for the tests that walk them. Test support only.
package faultscan

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// callRE matches a crash point call site.
var callRE = regexp.MustCompile(`fault\.Point\("([^"]+)"\)`)

// Points returns every crash point named in the non-test Go files under
// root (the module's directory), with the files naming each. Tests use it
// so a new call site is walked without anyone updating a list.
func Points(root string) (map[string][]string, error) {
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "_out") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, m := range callRE.FindAllSubmatch(b, -1) {
			out[string(m[1])] = append(out[string(m[1])], rel)
		}
		return nil
	})
	return out, err
}

// Names returns the keys of Points sorted.
func Names(points map[string][]string) []string {
	names := make([]string, 0, len(points))
	for n := range points {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
