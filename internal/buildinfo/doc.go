// Package buildinfo says which version a binary is, the same way for
// sprout and sproutctl: the version the build linked in (make sets
// main.version with -ldflags), else the module's version in the build
// information (go install of a tagged release), else "dev".
package buildinfo
