#!/bin/sh
# verify.sh checks that third_party/gnet is the gnet release named below
# plus the patches in this folder, applied in order, and nothing else
# (third_party/verify.sh, which every patched module shares). Run it from
# anywhere; it needs the go command and git.
exec sh "$(dirname "$0")/../../verify.sh" gnet github.com/panjf2000/gnet/v2 v2.10.0
