package buildinfo

import "testing"

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
