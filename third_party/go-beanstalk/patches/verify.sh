#!/bin/sh
# verify.sh checks that third_party/go-beanstalk is the go-beanstalk release
# named below plus the patches in this folder, applied in order, and
# nothing else (third_party/verify.sh, which every patched module shares).
# Run it from anywhere; it needs the go command and git.
exec sh "$(dirname "$0")/../../verify.sh" go-beanstalk github.com/beanstalkd/go-beanstalk v0.2.0
