package admin

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/store"
)

// Error is an answer other than success: an HTTP status and a message,
// written as {"error": Message}. Handlers return it; Auth.Check returns it
// for the console to answer in its own way.
type Error struct {
	Status  int
	Message string
	// RetryAfter, when positive, is sent as Retry-After (SetRetryAfter):
	// with 429, and some 503s.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Message }

// SetRetryAfter sets Retry-After in h when e has a RetryAfter: in whole
// seconds, rounded up, so a client that waits that long waits enough.
// Every answer of the side port that says it (the API's, the console's
// pages) says it so.
func (e *Error) SetRetryAfter(h http.Header) {
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(e.RetryAfter.Seconds())), 10))
	}
}

// errorf makes an *Error; the message starts "admin: " like every error
// of the package.
func errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Message: "admin: " + fmt.Sprintf(format, args...)}
}

// writeError answers err: an *Error as it says, anything else as 500.
func WriteError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Status: http.StatusInternalServerError, Message: "admin: " + err.Error()}
	}
	e.SetRetryAfter(w.Header())
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sprout"`)
	}
	b := append(appendString([]byte(`{"error":`), e.Message), "}\n"...)
	writeJSON(w, e.Status, b)
}

// writeJSON sends b, a JSON document, with status.
func writeJSON(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeValue sends v as JSON with encoding/json, for the small answers
// whose keys are the API's own ({"kicked": 3}).
func WriteValue(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		WriteError(w, err)
		return
	}
	writeJSON(w, status, append(b, '\n'))
}

// appendStats appends a JSON object of a stats document's figures, keyed
// as the protocol keys them, in its order: numbers as numbers (rusage as
// seconds with a fraction), strings as strings, draining as a boolean.
// The object is left open, so that more keys may follow (closeObject).
func appendStats(dst []byte, each func(fn func(f codec.Stat))) []byte {
	dst = append(dst, '{')
	first := true
	each(func(f codec.Stat) {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(appendString(dst, f.Key), ':')
		switch f.Kind {
		case codec.StatUint:
			dst = strconv.AppendUint(dst, f.Uint, 10)
		case codec.StatInt:
			dst = strconv.AppendInt(dst, f.Int, 10)
		case codec.StatString, codec.StatWord:
			dst = appendString(dst, f.Str)
		case codec.StatBool:
			dst = strconv.AppendBool(dst, f.Bool)
		case codec.StatSeconds:
			dst = codec.AppendSeconds(dst, f.Dur)
		}
	})
	return dst
}

func closeObject(dst []byte) []byte { return append(dst, '}') }

// appendServerStats appends the stats object.
func appendServerStats(dst []byte, s *codec.ServerStats) []byte {
	return closeObject(appendStats(dst, s.Each))
}

// appendTube appends a tube's stats-tube object.
func appendTube(dst []byte, t *store.TubeStats) []byte {
	cs := engine.WireTubeStats(t)
	return closeObject(appendStats(dst, cs.Each))
}

// appendJob appends a job's object: its stats-job figures and, if body is
// not nil, "body" and "body-encoding": text when the body is valid UTF-8,
// else base64.
func appendJob(dst []byte, j *store.JobStats, body []byte) []byte {
	cs := engine.WireJobStats(j)
	dst = appendStats(dst, cs.Each)
	if body != nil {
		dst = append(dst, `,"body":`...)
		if utf8.Valid(body) {
			dst = append(appendString(dst, string(body)), `,"body-encoding":"text"`...)
		} else {
			dst = append(dst, '"')
			dst = base64.StdEncoding.AppendEncode(dst, body)
			dst = append(dst, `","body-encoding":"base64"`...)
		}
	}
	return closeObject(dst)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Besides what JSON requires, it
// escapes <, > and & (as encoding/json does), so that a job's body is safe
// inside HTML, and U+2028 and U+2029, which end a line in JavaScript;
// invalid UTF-8 becomes U+FFFD.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			if r == utf8.RuneError {
				dst = append(dst, `\ufffd`...)
			} else {
				dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
