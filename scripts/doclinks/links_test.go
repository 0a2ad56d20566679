package doclinks

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	// inlineLink is [text](target) and ![alt](target); the target ends at
	// the first space (a title may follow) or the closing parenthesis.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)[^)]*\)`)
	// refLink is a reference definition: [name]: target.
	refLink = regexp.MustCompile(`^\s*\[[^\]]+\]:\s*(\S+)`)
	// codeSpan is inline code, where brackets are not links.
	codeSpan = regexp.MustCompile("`[^`]*`")
)

func TestRelativeLinksResolve(t *testing.T) {
	root := repoRoot(t)
	files := markdownFiles(t, root)
	if len(files) < 3 {
		t.Fatalf("found %d markdown files under %s: expected README.md, SECURITY.md and docs/", len(files), root)
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := headingSlugs(t, path)
		anchors[path] = a
		return a
	}
	for _, file := range files {
		rel, _ := filepath.Rel(root, file)
		for _, l := range links(t, file) {
			target, frag, _ := strings.Cut(l.target, "#")
			dest := file
			if target != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(target))
				fi, err := os.Stat(dest)
				if err != nil {
					t.Errorf("%s:%d: link %q: %v", rel, l.line, l.target, err)
					continue
				}
				if fi.IsDir() || !strings.HasSuffix(dest, ".md") {
					if frag != "" {
						t.Errorf("%s:%d: link %q: a section of a file that is not markdown", rel, l.line, l.target)
					}
					continue
				}
			}
			if frag != "" && !anchorsOf(dest)[frag] {
				t.Errorf("%s:%d: link %q: no heading with the anchor #%s in %s", rel, l.line, l.target, frag, filepath.Base(dest))
			}
		}
	}
}

// repoRoot is the directory of go.mod above the test's directory.
func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// markdownFiles are the project's .md files, leaving out build output,
// vendored trees and test data.
func markdownFiles(t *testing.T, root string) []string {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "_out", "bin", "embedded", "testdata", "vendor", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type link struct {
	line   int
	target string
}

// links are the relative link targets of a markdown file, outside code.
func links(t *testing.T, path string) []link {
	var out []link
	for i, line := range proseLines(t, path) {
		if line == "" {
			continue
		}
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			targets = append(targets, m[1])
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			target = strings.Trim(target, "<>")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			out = append(out, link{line: i + 1, target: target})
		}
	}
	return out
}

// proseLines are the file's lines with those inside fenced code blocks
// blanked, so that line numbers stay true.
func proseLines(t *testing.T, path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	inFence := false
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			inFence = !inFence
			lines[i] = ""
			continue
		}
		if inFence {
			lines[i] = ""
		}
	}
	return lines
}

// headingSlugs are the anchors GitHub gives the file's headings: lower
// case, punctuation dropped, spaces turned to hyphens, and -1, -2 ... on
// repeats.
func headingSlugs(t *testing.T, path string) map[string]bool {
	slugs := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(t, path) {
		hashes := len(l) - len(strings.TrimLeft(l, "#"))
		if hashes == 0 || hashes > 6 || !strings.HasPrefix(l[hashes:], " ") {
			continue
		}
		s := slug(strings.TrimSpace(l[hashes:]))
		if n := seen[s]; n > 0 {
			slugs[s+"-"+strconv.Itoa(n)] = true
		} else {
			slugs[s] = true
		}
		seen[s]++
	}
	return slugs
}

func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Installing with kubectl apply (DaemonSet)": "installing-with-kubectl-apply-daemonset",
		"`eni-cni repair`":                          "eni-cni-repair",
		"What `make test` changes on the machine":   "what-make-test-changes-on-the-machine",
		"A dry pool is a moment, not an error":      "a-dry-pool-is-a-moment-not-an-error",
		"max-pods":                                  "max-pods",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}
