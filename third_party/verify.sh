#!/bin/sh
# verify.sh DIR MODULE VERSION checks that third_party/DIR is the release
# VERSION of the Go module MODULE plus DIR's patches/*.patch, applied in
# order, and nothing else. Each patched module's patches/verify.sh runs it
# with its own three. It needs the go command (the release comes from the
# module cache or the module proxy) and git (for git apply).
set -eu
dir=$1 module=$2 version=$3
copy=$(cd "$(dirname "$0")/$dir" && pwd)
cd "$copy"
go mod download "$module@$version"
pristine="$(go env GOMODCACHE)/$module@$version"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -R "$pristine/." "$tmp/"
chmod -R u+w "$tmp"
for p in "$copy"/patches/*.patch; do
	(cd "$tmp" && git apply "$p") || { echo "verify.sh: $(basename "$p") does not apply" >&2; exit 1; }
done
cp -R "$copy/patches" "$copy/PATCHES.md" "$tmp/"
if diff -r "$tmp" "$copy"; then
	echo "third_party/$dir is $module $version with patches/*.patch, and nothing else"
else
	echo "verify.sh: third_party/$dir differs from $module $version with patches/*.patch (above)" >&2
	exit 1
fi
