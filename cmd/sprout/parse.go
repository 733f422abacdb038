package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// The command line is scanned by hand, from flagTable, because none of the
// well-kept libraries reads beanstalkd's syntax: spf13/pflag (v1.1.0)
// takes -z=5 as "5" where beanstalkd takes "=5", reads -loops as -l oops
// with no way to let Sprout's one-dash long names win, and keeps a stray
// word as a positional argument where beanstalkd stops with an error;
// peterbourgon/ff builds on the standard flag package, which has no
// combined letters (-VV, -Vp1234) at all.

// Lookups into flagTable; built once, never written.
var (
	flagsByLetter = indexFlags(func(f *flag) []string { return strings.Split(f.letters, "") })
	flagsByLong   = indexFlags(func(f *flag) []string { return []string{f.long} })
	flagsByEnv    = indexFlags(func(f *flag) []string { return []string{f.envName()} })
)

func indexFlags(keys func(f *flag) []string) map[string]*flag {
	m := make(map[string]*flag)
	for _, f := range flagTable {
		for _, k := range keys(f) {
			if k != "" {
				m[k] = f
			}
		}
	}
	return m
}

// parseArgs reads the command line (without the program name) and the
// environment (KEY=value each) into options.
//
// The command line is read as beanstalkd's optparse reads it: arguments
// are scanned left to right; each starts with '-' and holds one or more
// one-letter flags (-VV); a flag that takes a value uses the rest of its
// argument when that is non-empty (-p1234, -Vp1234; -z=5 is "=5") and
// otherwise the next argument, whatever it looks like (-z -1), unless it
// starts with "--": -l --port=5 lacks its value, it does not listen on
// host "--port=5". -v and -h end the scan at once, so nothing after them
// is checked, nor the environment. The first argument that is not a flag,
// including a lone "-", is an error. Every flag with a long name is also
// --name VALUE or --name=VALUE; Sprout's own flags (those without a
// letter) also -name, which wins over beanstalkd's reading (-loops is not
// -l oops; -loopsy still is).
//
// Each value is checked when the scan meets it, as beanstalkd does. Then
// the SPROUT_* variables are applied (envSettings), then the command line
// over them, in its order, so the command line wins and -f and -F keep
// their "last one wins".
//
// Each error is one line on stderr, prefixed "sprout: ", and exits 5: a
// refused value names the flag or variable as written and the value; an
// unknown flag or argument is followed by the usage text, as in
// beanstalkd. Warnings go there too and the parse goes on. parseArgs
// never exits: it returns what main should do and the exit code.
func parseArgs(args, environ []string, stderr io.Writer) (options, action, int) {
	warn := func(msg string) { fmt.Fprintf(stderr, "sprout: %s\n", msg) }
	fail := func(err error) (options, action, int) {
		warn(err.Error())
		var unknown usageError
		if errors.As(err, &unknown) {
			writeUsage(stderr)
		}
		return options{}, actionFail, exitUsage
	}

	cmdline, act, err := scan(args, warn)
	if err != nil {
		return fail(err)
	}
	if act != actionRun {
		return options{}, act, exitOK
	}
	env, err := envSettings(environ, warn)
	if err != nil {
		return fail(err)
	}
	var o options
	for _, s := range env {
		if err := s.apply(&o); err != nil {
			if !isWarning(err) {
				return fail(err)
			}
			warn(err.Error())
		}
	}
	if slices.ContainsFunc(cmdline, func(s setting) bool { return s.flag.long == "verbose" }) {
		o.verbosity = 0 // -V counts up on the command line, which wins over SPROUT_VERBOSE
	}
	for _, s := range cmdline {
		_ = s.apply(&o) // checked, and its warnings printed, by scan
	}
	if err := checkCluster(o); err != nil {
		return fail(err)
	}
	if err := checkTLS(o); err != nil {
		return fail(err)
	}
	return o, actionRun, exitOK
}

// setting is one flag given a value, or a bare letter, on the command line
// or in the environment.
type setting struct {
	flag  *flag
	name  string // as written: -z, --max-job-size, SPROUT_MAX_JOB_SIZE
	value string
	bare  byte // the letter, for a letter that takes no value (-F)
}

// apply applies s to o. A refused value comes back as one line that names
// it; a warning comes back as a warning.
func (s setting) apply(o *options) error {
	var err error
	if s.bare != 0 {
		err = s.flag.bare(o, s.bare)
	} else {
		err = s.flag.set(o, s.value)
	}
	var want wantError
	if errors.As(err, &want) {
		return fmt.Errorf("invalid %s: %q (%w)", s.name, s.value, want)
	}
	return err
}

func isWarning(err error) bool {
	var w warning
	return errors.As(err, &w)
}

// usageError is an unknown flag or argument, which the usage text
// follows, as in beanstalkd.
type usageError string

func (e usageError) Error() string { return string(e) }

// scan reads the command line into settings, checking each value as it
// goes (see parseArgs); it stops at -v, -h or the first error. Warnings
// are printed as they are met.
func scan(args []string, warn func(string)) ([]setting, action, error) {
	var settings []setting
	var checked options // values are checked in order, on a scratch copy
	add := func(s setting) error {
		if err := s.apply(&checked); err != nil {
			if !isWarning(err) {
				return err
			}
			warn(err.Error())
		}
		settings = append(settings, s)
		return nil
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		// next takes the following argument as name's value.
		next := func(name string) (string, error) {
			if i+1 == len(args) {
				return "", fmt.Errorf("flag requires an argument: %s", name)
			}
			if v := args[i+1]; strings.HasPrefix(v, "--") {
				return "", fmt.Errorf("flag requires an argument: %s (the next argument, %s, is a flag)", name, v)
			}
			i++
			return args[i], nil
		}

		if f, name, value, hasValue, ok := longFlag(arg); ok {
			switch {
			case f.ends != actionRun && hasValue:
				return nil, actionFail, fmt.Errorf("%s takes no value", arg)
			case f.ends != actionRun:
				return settings, f.ends, nil
			case !hasValue:
				var err error
				if value, err = next(name); err != nil {
					return nil, actionFail, err
				}
			}
			if err := add(setting{flag: f, name: name, value: value}); err != nil {
				return nil, actionFail, err
			}
			continue
		}
		if len(arg) < 2 || arg[0] != '-' {
			return nil, actionFail, usageError("unknown argument: " + arg)
		}
		if strings.HasPrefix(arg, "--") {
			// Never a beanstalkd flag; name it whole rather than as "-".
			return nil, actionFail, usageError("unknown flag: " + arg)
		}

		for j := 1; j < len(arg); j++ {
			letter := arg[j]
			f := flagsByLetter[string(letter)]
			name := "-" + string(letter)
			switch {
			case f == nil:
				return nil, actionFail, usageError("unknown flag: " + name)
			case f.ends != actionRun:
				return settings, f.ends, nil
			case f.bare != nil:
				if err := add(setting{flag: f, name: name, bare: letter}); err != nil {
					return nil, actionFail, err
				}
				continue
			}
			value := arg[j+1:]
			if value != "" {
				j = len(arg)
			} else {
				var err error
				if value, err = next(name); err != nil {
					return nil, actionFail, err
				}
			}
			if err := add(setting{flag: f, name: name, value: value}); err != nil {
				return nil, actionFail, err
			}
		}
	}
	return settings, actionRun, nil
}

// longFlag finds the flag arg names by its long name: --name or
// --name=value for any flag that has one, -name or -name=value only for
// a flag without a letter. name is the flag's --name, for messages.
func longFlag(arg string) (f *flag, name, value string, hasValue, ok bool) {
	rest, double := strings.CutPrefix(arg, "--")
	if !double {
		if rest, ok = strings.CutPrefix(arg, "-"); !ok {
			return nil, "", "", false, false
		}
	}
	long, value, hasValue := strings.Cut(rest, "=")
	f = flagsByLong[long]
	if f == nil || !double && f.letters != "" {
		return nil, "", "", false, false
	}
	return f, "--" + long, value, hasValue, true
}
