package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink is a Markdown link or image, or an HTML src; its target in group 1.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)|src="([^"]+)"`)

// heading is a Markdown heading line.
var heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)

// TestLinks: every relative link of the guides and the README names a file
// of the tree, and every #anchor a heading of its page, as GitHub makes
// them, so moving a section breaks the build, not the link.
func TestLinks(t *testing.T) {
	for _, page := range guides(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(withoutCode(string(b)), -1) {
			target := m[1] + m[2]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %s: %v", page, target, err)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !hasAnchor(t, path, anchor) {
				t.Errorf("%s: link %s: %s has no heading #%s", page, target, path, anchor)
			}
		}
	}
}

// withoutCode drops fenced blocks, whose text is not links.
func withoutCode(s string) string {
	var out strings.Builder
	in := false
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "```") {
			in = !in
			continue
		}
		if !in {
			out.WriteString(line + "\n")
		}
	}
	return out.String()
}

// hasAnchor reports whether the page at path has a heading whose GitHub
// anchor is anchor: lower case, spaces as hyphens, punctuation dropped.
func hasAnchor(t *testing.T, path, anchor string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range heading.FindAllStringSubmatch(withoutCode(string(b)), -1) {
		var slug strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				slug.WriteRune(r)
			}
		}
		if slug.String() == anchor {
			return true
		}
	}
	return false
}
