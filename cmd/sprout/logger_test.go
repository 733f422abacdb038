package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/rs/zerolog"
)

// TestLoggerTime: both log formats stamp each line to the millisecond.
func TestLoggerTime(t *testing.T) {
	ms := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)`)
	var out bytes.Buffer
	l := newLogger(config{logFormat: "json", logLevel: zerolog.InfoLevel}, &out)
	l.Info().Msg("a line")
	var line struct{ Time string }
	if err := json.Unmarshal(out.Bytes(), &line); err != nil || !ms.MatchString(line.Time) || len(line.Time) > len("2006-01-02T15:04:05.000-07:00") {
		t.Errorf("a JSON line's time: %q (%v), want RFC 3339 to the millisecond", line.Time, err)
	}
	out.Reset()
	l = newLogger(config{logFormat: "console", logLevel: zerolog.InfoLevel}, &out)
	l.Info().Msg("a line")
	if !ms.Match(out.Bytes()) {
		t.Errorf("a console line: %q, want its time to the millisecond", out.String())
	}
}
