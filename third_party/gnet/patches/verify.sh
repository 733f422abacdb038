#!/bin/sh
# verify.sh checks that third_party/gnet is the gnet release named below
# plus the patches in this folder, applied in order, and nothing else.
# Run it from anywhere; it needs the go command (the release comes from
# the module cache or the module proxy) and git (for git apply).
set -eu
version=v2.10.0
gnet=$(cd "$(dirname "$0")/.." && pwd)
cd "$gnet"
go mod download "github.com/panjf2000/gnet/v2@$version"
pristine="$(go env GOMODCACHE)/github.com/panjf2000/gnet/v2@$version"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -R "$pristine/." "$tmp/"
chmod -R u+w "$tmp"
for p in "$gnet"/patches/*.patch; do
	(cd "$tmp" && git apply "$p") || { echo "verify.sh: $(basename "$p") does not apply" >&2; exit 1; }
done
cp -R "$gnet/patches" "$gnet/PATCHES.md" "$tmp/"
if diff -r "$tmp" "$gnet"; then
	echo "third_party/gnet is gnet $version with patches/*.patch, and nothing else"
else
	echo "verify.sh: third_party/gnet differs from gnet $version with patches/*.patch (above)" >&2
	exit 1
fi
