// Package buildinfo says which version a binary is, the same way for
// sprout and sproutctl: the version the build linked in (make sets
// main.version with -ldflags), else the module's version in the build
// information (go install of a tagged release, or the VCS stamp of a
// plain go build), else "dev".
//
// # The version stats reports
//
// Clients read stats' version, and some feature-test it, so the server
// reports StatsVersion: the beanstalkd release whose protocol Sprout
// speaks as a full semantic version, with Sprout's own version as build
// metadata (1.13.0+sprout.6e30323). Semantic Versioning ignores build
// metadata in comparisons, so that compares equal to 1.13.0. What the
// clients do with the value (checked against their sources, 2026-11):
//
//   - fivebeans 1.5.0 (npm): the library never reads it; its test suite
//     appends ".0", strips a fourth numeric part, and asks semver (node,
//     ~5.3) whether it satisfies ">= 1.8.0" before testing kick-job. A
//     bare commit hash or "dev" throws "Invalid Version"; "1.13.0+sprout.X"
//     becomes "1.13.0+sprout.X.0", which is valid (the ".0" joins the
//     build metadata) and satisfies the range. A prerelease form
//     (1.13.0-sprout) would not: node's semver leaves prereleases out of
//     ranges.
//   - pheanstalk 5 (PHP): ServerStats keeps it as a string.
//   - beaneater (Ruby): YAML-loads stats; its own tests compare
//     version.to_f, which reads "1.13.0+sprout.X" as 1.13.
//   - greenstalk (Python): a str; go-beanstalk: a map[string]string.
//   - JavaBeanstalkClient (Java): getServerVersion returns the string.
//     Its own tests split the quoted value on "." and parse two or three
//     integers, which no build metadata passes; only its tests do this.
//
// The value is sent as a quoted YAML string, as beanstalkd 1.13 sends
// "1.13", so YAML readers never take it for a number.
package buildinfo
