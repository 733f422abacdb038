package buildinfo

import "runtime/debug"

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
