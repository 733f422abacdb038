package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Protocol is the beanstalkd release whose wire behaviour Sprout follows.
const Protocol = "1.13"

// Version is linked, the link-time version, when it is set; else the
// main module's version from the build information, else "dev".
func Version(linked string) string {
	if linked != "" {
		return linked
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}

// StatsVersion is what stats reports as version for a server of the
// given version (see doc.go): Protocol as MAJOR.MINOR.0, and "sprout."
// and the version as build metadata. Semantic Versioning allows only
// ASCII letters, digits and '-' in build metadata, in non-empty parts
// joined by dots, so any other byte of version becomes a dot and empty
// parts are dropped: v0.0.0-20261125051700-6e30323abcde+dirty becomes
// 1.13.0+sprout.v0.0.0-20261125051700-6e30323abcde.dirty.
func StatsVersion(version string) string {
	var parts []string
	for part := range strings.FieldsFuncSeq(version, func(r rune) bool {
		return !(r == '-' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	}) {
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		parts = []string{"unknown"}
	}
	return Protocol + ".0+sprout." + strings.Join(parts, ".")
}
