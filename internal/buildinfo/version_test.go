package buildinfo

import (
	"testing"

	"github.com/Masterminds/semver/v3"
)

func TestVersion(t *testing.T) {
	if got := Version("v1.2.3"); got != "v1.2.3" {
		t.Errorf("Version(v1.2.3) = %q: the linked version comes first", got)
	}
	// A test binary's main module is built from the tree: "(devel)" or a
	// pseudo-version, never empty.
	if got := Version(""); got == "" || got == "(devel)" {
		t.Errorf("Version(\"\") = %q, want the module's version or dev", got)
	}
}

// TestStatsVersionIsSemver checks what every build path can link in or
// find: make build's git describe (a hash, a tag, -dirty), a plain go
// build's VCS stamp (a pseudo-version with +dirty), go install's tag, the
// fallback dev, and nothing at all. Each must give a strict semantic
// version that compares equal to the protocol's release, so that a client
// feature-testing ">= 1.13.0" (or any older release) finds every command.
func TestStatsVersionIsSemver(t *testing.T) {
	floor := semver.MustParse("1.13.0")
	for _, tc := range []struct{ version, want string }{
		{"6e30323", "1.13.0+sprout.6e30323"},
		{"6e30323-dirty", "1.13.0+sprout.6e30323-dirty"},
		{"v0.4.0-12-g6e30323", "1.13.0+sprout.v0.4.0-12-g6e30323"},
		{"v0.0.0-20261125051700-6e30323abcde+dirty", "1.13.0+sprout.v0.0.0-20261125051700-6e30323abcde.dirty"},
		{"v1.2.3", "1.13.0+sprout.v1.2.3"},
		{"dev", "1.13.0+sprout.dev"},
		{"", "1.13.0+sprout.unknown"},
		{"a..b__c/é", "1.13.0+sprout.a.b.c"},
		{"+", "1.13.0+sprout.unknown"},
	} {
		got := StatsVersion(tc.version)
		if got != tc.want {
			t.Errorf("StatsVersion(%q) = %q, want %q", tc.version, got, tc.want)
		}
		v, err := semver.StrictNewVersion(got)
		if err != nil {
			t.Errorf("StatsVersion(%q) = %q: not a semantic version: %v", tc.version, got, err)
			continue
		}
		if v.Compare(floor) != 0 || v.Prerelease() != "" {
			t.Errorf("StatsVersion(%q) = %q compares %d with %s, want equal (no prerelease)", tc.version, got, v.Compare(floor), floor)
		}
		// fivebeans' suite appends ".0" before asking semver; the result
		// must still parse and satisfy its range.
		if v, err := semver.StrictNewVersion(got + ".0"); err != nil || !v.GreaterThanEqual(semver.MustParse("1.8.0")) {
			t.Errorf("%q + \".0\" = %v, %v; want a version >= 1.8.0", got, v, err)
		}
	}
}
