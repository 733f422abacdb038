package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// envPrefix starts the environment variables that set flags:
// SPROUT_<NAME>, NAME being the flag's long name in upper case with '_'
// for '-' (SPROUT_MAX_OUTPUT for --max-output, SPROUT_LISTEN for -l).
const envPrefix = "SPROUT_"

// letterAliases are the long names of beanstalkd's one-letter flags that
// take a value. On the command line --listen ADDR is -l ADDR.
var letterAliases = map[string]byte{
	"listen":       'l',
	"port":         'p',
	"max-job-size": 'z',
	"wal-dir":      'b',
	"fsync-ms":     'f',
	"segment-size": 's',
	"user":         'u',
}

// Value-less one-letter flags, reachable from the environment only:
// SPROUT_NO_FSYNC=true is -F, SPROUT_VERBOSE=2 is -VV.
const (
	envNoFsync = "no-fsync"
	envVerbose = "verbose"
)

// expandAliases rewrites --listen ADDR, --listen=ADDR and the other long
// names of letterAliases into their one-letter flags, so one parser reads
// both. Anything else is left for parseArgs.
func expandAliases(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		arg := args[i]
		rest, ok := strings.CutPrefix(arg, "--")
		if !ok {
			out = append(out, arg)
			continue
		}
		name, value, hasValue := strings.Cut(rest, "=")
		letter, ok := letterAliases[name]
		if !ok {
			out = append(out, arg)
			continue
		}
		out = append(out, "-"+string(letter))
		if hasValue {
			out = append(out, value)
		} else if i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// envArgs turns SPROUT_* variables into command-line arguments, to be put
// before the real ones so that flags win. Unknown SPROUT_* variables and
// unreadable values are reported on stderr and skipped (a typo must not
// stop a restart, but must not pass unnoticed either).
func envArgs(environ []string, stderr io.Writer) []string {
	var args []string
	vars := slices.Clone(environ)
	slices.Sort(vars) // one order, whatever the environment's
	for _, kv := range vars {
		key, value, _ := strings.Cut(kv, "=")
		suffix, ok := strings.CutPrefix(key, envPrefix)
		if !ok {
			continue
		}
		name := strings.ToLower(strings.ReplaceAll(suffix, "_", "-"))
		switch {
		case longFlags[name] != nil:
			args = append(args, "--"+name+"="+value)
		case letterAliases[name] != 0:
			args = append(args, "-"+string(letterAliases[name]), value)
		case name == envNoFsync:
			if on, err := strconv.ParseBool(value); err != nil {
				fmt.Fprintf(stderr, "sprout: ignoring %s=%q: want true or false\n", key, value)
			} else if on {
				args = append(args, "-F")
			}
		case name == envVerbose:
			if n, err := strconv.ParseUint(value, 10, 8); err != nil {
				fmt.Fprintf(stderr, "sprout: ignoring %s=%q: want a count\n", key, value)
			} else if n > 0 {
				args = append(args, "-"+strings.Repeat("V", int(n)))
			}
		default:
			fmt.Fprintf(stderr, "sprout: ignoring unknown environment variable %s\n", key)
		}
	}
	return args
}

// commandLine is what parseArgs reads: the environment's settings, then the
// real arguments, with long aliases expanded.
func commandLine() []string {
	return expandAliases(append(envArgs(os.Environ(), os.Stderr), os.Args[1:]...))
}
