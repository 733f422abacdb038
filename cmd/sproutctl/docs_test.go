package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/sproutmq/sprout/internal/docgen"
)

var update = flag.Bool("update", false, "rewrite the generated documentation (make docs)")

// manDir holds sproutctl(1) and a page per command, sproutctl-put(1) and
// so on, beside sprout(1).
const manDir = "../../docs/man"

// TestManPages: docs/man holds the pages cobra's generator makes of the
// command tree, and no other sproutctl page; each lists every flag its
// command takes, its own and its parents' (make docs rewrites them: go
// test -run TestManPages -args -update).
func TestManPages(t *testing.T) {
	root := newRoot(&options{getenv: func(string) string { return "" }, stdin: strings.NewReader(""),
		stdout: io.Discard, stderr: io.Discard, ctx: context.Background()})
	pages := manPages(t, root)

	for name, page := range pages {
		docgen.CheckFile(t, filepath.Join(manDir, name), page, *update)
	}
	committed, err := filepath.Glob(filepath.Join(manDir, "sproutctl*.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range committed {
		if _, ok := pages[filepath.Base(path)]; !ok {
			if *update {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				continue
			}
			t.Errorf("%s is not a page of any command (make docs removes it)", path)
		}
	}

	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c != root {
			return
		}
		name := strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1"
		page, ok := pages[name]
		if !ok {
			t.Errorf("no page %s for %q", name, c.CommandPath())
		}
		for _, fs := range []*pflag.FlagSet{c.NonInheritedFlags(), c.InheritedFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				// cobra writes each option in bold: \fB--name\fP.
				if !f.Hidden && !strings.Contains(page, `\fB--`+f.Name+`\fP`) {
					t.Errorf("%s does not list --%s", name, f.Name)
				}
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for _, want := range []string{"sproutctl.1", "sproutctl-put.1", "sproutctl-members.1"} {
		if _, ok := pages[want]; !ok {
			t.Errorf("no page %s among %v", want, slices.Sorted(maps.Keys(pages)))
		}
	}
}

// manPages generates the tree's pages with cobra's generator, without a
// date (it would change at every regeneration), by file name.
func manPages(t *testing.T, root *cobra.Command) map[string]string {
	t.Helper()
	var mark func(c *cobra.Command)
	mark = func(c *cobra.Command) {
		c.DisableAutoGenTag = true
		for _, sub := range c.Commands() {
			mark(sub)
		}
	}
	mark(root)
	date := time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	header := &doc.GenManHeader{Title: "SPROUTCTL", Section: "1", Source: "Sprout", Manual: "User Commands", Date: &date}
	if err := doc.GenManTree(root, header, dir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	pages := make(map[string]string)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		pages[e.Name()] = string(bytes.Replace(b, []byte(`"`+date.Format("Jan 2006")+`"`), []byte(`""`), 1))
	}
	return pages
}
