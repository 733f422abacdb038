package main

import (
	"fmt"
	"slices"
	"strings"
)

// envPrefix starts the environment variables that set flags: SPROUT_NAME
// is --name (flag.envName): SPROUT_MAX_OUTPUT is --max-output,
// SPROUT_LISTEN is -l, SPROUT_NO_FSYNC=true is -F, SPROUT_VERBOSE=2 is -VV.
const envPrefix = "SPROUT_"

// notServerVariables are the SPROUT_ variables that are not the server's:
// the project's tests, benchmarks and sproutctl read them, and a server
// started where they are set inherits them, so they are ignored without
// a word. Any other SPROUT_ variable the table does not know is warned
// about: it is most likely a mistyped setting. TestProjectVariablesAreKnown keeps this list
// in step with the code that reads them.
var notServerVariables = []string{
	"SPROUT_REF_BEANSTALKD",       // internal/testproc: the reference beanstalkd
	"SPROUT_CONFORMANCE_SELFTEST", // internal/conformance: diff beanstalkd against itself
	"SPROUT_SOAK",                 // internal/storm: how long the soak runs
	"SPROUT_CHURN",                // internal/member: how long the cluster's churn test runs
	"SPROUT_STORM_GOALS",          // internal/storm: assert the goals
	"SPROUT_REQUIRE_BROWSER",      // internal/console: fail, not skip, without chromium
	"SPROUT_SERVER",               // cmd/sproutctl: the server's protocol address
	"SPROUT_API",                  // cmd/sproutctl: the server's side port, for the admin API
	"SPROUT_CLUSTERFAULT_BINARY",  // internal/clusterfault: the sprout its namespaced rounds run
}

// envSettings reads environ's SPROUT_ variables, in name order, as
// settings for parseArgs to apply before the command line's.
//
// An unknown variable is warned about and skipped: a typo must not stop a
// restart, but must not pass unnoticed either. A value is checked as the
// same flag's on the command line, and a refused one stops the start
// (parseArgs): a server must not run on half its settings. An empty value
// is refused too, unless the flag says what empty means (SPROUT_HTTP=
// turns the image's side port off): SPROUT_PORT= is far more often a
// template's missing value than a wish for any free port, and the way to
// ask for a default is to leave the variable unset.
func envSettings(environ []string, warn func(string)) ([]setting, error) {
	var settings []setting
	vars := slices.Clone(environ)
	slices.Sort(vars) // one order, whatever the environment's
	for _, kv := range vars {
		key, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(key, envPrefix) {
			continue
		}
		f := flagsByEnv[key]
		switch {
		case f == nil && slices.Contains(notServerVariables, key):
			continue
		case f == nil:
			warn("ignoring unknown environment variable " + key)
			continue
		case value == "" && f.emptyMeans == "":
			return nil, fmt.Errorf(`invalid %s: "" (empty: unset it for the default)`, key)
		}
		settings = append(settings, setting{flag: f, name: key, value: value})
	}
	return settings, nil
}
