// Command deb builds Sprout's Debian package with nfpm from a tree that
// make install staged with Debian's paths (make deb runs it; see
// deploy/README.md): every file of the tree, /etc/default/sprout as a conffile,
// the copyright file, README.Debian and a changelog, and the maintainer
// scripts, which create the system user sprout and /var/lib/sprout.
package main

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
)

var (
	//go:embed postinst
	postinst []byte
	//go:embed postrm
	postrm []byte
	//go:embed copyright
	copyright []byte
	//go:embed README.Debian
	readme []byte
	//go:embed lintian-overrides
	overrides []byte
)

// conffiles are the files of the tree dpkg treats as configuration: an
// operator's edits survive upgrades.
var conffiles = map[string]bool{"/etc/default/sprout": true}

// docDir is the package's documentation directory; overridesFile tells
// lintian which of its tags do not apply, and why.
const (
	docDir        = "/usr/share/doc/sprout"
	overridesFile = "/usr/share/lintian/overrides/sprout"
)

type options struct {
	root, version, arch, commit, maintainer, out string
	date                                         time.Time
}

func main() {
	var o options
	var epoch int64
	flag.StringVar(&o.root, "root", "", "the tree make install staged (DESTDIR)")
	flag.StringVar(&o.version, "version", "", "the package's version")
	flag.StringVar(&o.arch, "arch", "amd64", "the package's architecture (GOARCH)")
	flag.StringVar(&o.commit, "commit", "unknown", "the commit built, for the changelog")
	flag.StringVar(&o.maintainer, "maintainer", "Sprout maintainers <sproutmq@users.noreply.github.com>", "the Maintainer field")
	flag.Int64Var(&epoch, "date", 0, "the build's time in unix seconds, for the changelog and the files (default: $SOURCE_DATE_EPOCH, else now)")
	flag.StringVar(&o.out, "out", "", "the .deb to write")
	flag.Parse()
	o.date = buildDate(epoch)
	if o.root == "" || o.version == "" || o.out == "" {
		fmt.Fprintln(os.Stderr, "deb: -root, -version and -out are required")
		os.Exit(2)
	}
	if err := build(o); err != nil {
		fmt.Fprintln(os.Stderr, "deb:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", o.out)
}

// buildDate is -date, else SOURCE_DATE_EPOCH, else now: a package built
// twice from one commit with the same date is the same bytes.
func buildDate(epoch int64) time.Time {
	if epoch == 0 {
		epoch, _ = strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	}
	if epoch == 0 {
		return time.Now().UTC().Truncate(time.Second)
	}
	return time.Unix(epoch, 0).UTC()
}

func build(o options) error {
	// The documentation the tree does not hold, written beside it.
	extra, err := os.MkdirTemp("", "sprout-deb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(extra)
	changelog, err := gzipped(debianChangelog(o))
	if err != nil {
		return err
	}
	generated := []struct {
		dst     string
		content []byte
		mode    os.FileMode
	}{
		{docDir + "/copyright", copyright, 0o644},
		{docDir + "/README.Debian", readme, 0o644},
		{docDir + "/changelog.gz", changelog, 0o644},
		{overridesFile, overrides, 0o644},
		{"postinst", postinst, 0o755},
		{"postrm", postrm, 0o755},
	}
	srcOf := make(map[string]string)
	for i, g := range generated {
		src := filepath.Join(extra, strconv.Itoa(i))
		if err := os.WriteFile(src, g.content, g.mode); err != nil {
			return err
		}
		srcOf[g.dst] = src
	}

	var contents files.Contents
	add := func(src, dst string, mode os.FileMode) {
		typ := files.TypeFile
		if conffiles[dst] {
			typ = files.TypeConfig
		}
		contents = append(contents, &files.Content{Source: src, Destination: dst, Type: typ,
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: o.date}})
	}
	err = filepath.WalkDir(o.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", path)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(o.root, path)
		if err != nil {
			return err
		}
		add(path, "/"+filepath.ToSlash(rel), info.Mode().Perm())
		return nil
	})
	if err != nil {
		return err
	}
	for _, dst := range []string{docDir + "/copyright", docDir + "/README.Debian", docDir + "/changelog.gz", overridesFile} {
		add(srcOf[dst], dst, 0o644)
	}

	info := nfpm.WithDefaults(&nfpm.Info{
		Name:        "sprout",
		Arch:        o.arch,
		Platform:    "linux",
		Version:     o.version,
		Section:     "net",
		Priority:    "optional",
		Maintainer:  o.maintainer,
		Homepage:    "https://github.com/sproutmq/sprout",
		Description: description,
		MTime:       o.date,
		Overridables: nfpm.Overridables{
			Depends:  []string{"adduser"},
			Contents: contents,
			Scripts:  nfpm.Scripts{PostInstall: srcOf["postinst"], PostRemove: srcOf["postrm"]},
		},
	})
	// The version is Debian's as given: no semantic version parsing.
	info.VersionSchema = "none"
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return err
	}
	f, err := os.Create(o.out)
	if err != nil {
		return err
	}
	if err := deb.Default.Package(info, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// description is the package's synopsis, then its long description.
const description = `work-queue server compatible with beanstalkd
 Sprout speaks the beanstalkd protocol as of beanstalkd 1.13, so existing
 beanstalkd clients work with it unchanged. It serves many connections on
 an event-loop reactor, keeps jobs in a write-ahead log that survives
 restarts and crashes, can replicate one queue over three or five members
 through Raft, and serves Prometheus metrics, health probes, an admin API
 and a web console on an HTTP side port.
 .
 This package contains the server, sprout, and the operator's command
 line, sproutctl, with their man pages, systemd units and shell
 completions.`

// debianChangelog is the one entry of the package's changelog: what was
// built, by whom, when.
func debianChangelog(o options) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "sprout (%s) unstable; urgency=medium\n\n", o.version)
	fmt.Fprintf(&b, "  * Built by make deb from commit %s.\n\n", o.commit)
	fmt.Fprintf(&b, " -- %s  %s\n", o.maintainer, o.date.Format("Mon, 02 Jan 2006 15:04:05 -0700"))
	return b.Bytes()
}

// gzipped is b compressed as gzip -9n does it: no name, no time.
func gzipped(b []byte) ([]byte, error) {
	var out bytes.Buffer
	w, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
