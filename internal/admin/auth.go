package admin

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/time/rate"
)

const (
	// SessionCookie is the name of the console's session cookie.
	SessionCookie = "sprout_session"
	// CSRFHeader carries a session's CSRF token on requests that change
	// something; a form may send it as the field CSRFField instead.
	CSRFHeader = "X-CSRF-Token"
	CSRFField  = "csrf-token"

	// DefaultSessionTTL is how long a session lasts after its login.
	DefaultSessionTTL = 12 * time.Hour
	// maxSessions bounds the sessions kept; past it a login ends the one
	// closest to expiry.
	maxSessions = 1000

	// Failed attempts (a wrong token, an unknown session) are limited per
	// remote IP, failBurst at once and then one per failEvery, and over all
	// remotes together, globalFailBurst at once and globalFailRate a
	// second, so that many addresses cannot guess faster than a few. While
	// a remote (or everyone) is over its limit, every request from it that
	// carries a credential is answered 429 without the credential being
	// looked at: otherwise a right guess would still show.
	failBurst       = 10
	failEvery       = 6 * time.Second
	globalFailBurst = 100
	globalFailRate  = 10
	// maxLimited bounds the remotes whose failures are remembered; past it
	// a new remote is held to the global limit alone.
	maxLimited = 10000
	// failLogEvery is how often at most a failed attempt is logged; the
	// line counts the ones left out since the last.
	failLogEvery = 10 * time.Second
)

// Access is what a request may do, as Auth decided it.
type Access struct {
	// Authenticated: the request carried the admin token, or the cookie of
	// a session opened with it. Always false when no token is set.
	Authenticated bool
	// Session: authenticated by the session cookie (not a bearer token).
	Session bool
	// Changes: it may change jobs and tubes. Bodies: job bodies may be
	// shown. Both hold exactly when it is authenticated; with no token set
	// the API is read-only and shows no bodies.
	Changes, Bodies bool
}

// Auth decides who may do what: see doc.go. It is safe for concurrent use.
type Auth struct {
	// tokenHash is the SHA-256 of the admin token; nil without one.
	// Comparing hashes takes the same time whatever the length of a guess.
	tokenHash []byte           // immutable
	ttl       time.Duration    // immutable
	now       func() time.Time // immutable
	log       zerolog.Logger   // immutable

	mu       sync.Mutex
	sessions map[[sha256.Size]byte]*session // guarded by mu; keyed by the hash of the cookie's value
	limited  map[string]*rate.Limiter       // guarded by mu; failures by remote IP
	global   *rate.Limiter                  // guarded by mu

	failMu     sync.Mutex
	failLogged time.Time // guarded by failMu: when a failure was last logged
	failQuiet  int       // guarded by failMu: failures not logged since
}

// session is one login of the console.
type session struct {
	csrf    string    // immutable
	expires time.Time // immutable
}

// NewAuth returns the rules for token ("" for none: read-only) alone,
// for a side port's handlers outside the API (a cluster member's
// membership changes) to be guarded as the API's changes are.
func NewAuth(token string, log zerolog.Logger) *Auth {
	return newAuth(token, DefaultSessionTTL, time.Now, log)
}

// newAuth returns the rules for token ("" for none: read-only).
func newAuth(token string, ttl time.Duration, now func() time.Time, log zerolog.Logger) *Auth {
	a := &Auth{
		ttl:      ttl,
		now:      now,
		log:      log,
		sessions: make(map[[sha256.Size]byte]*session),
		limited:  make(map[string]*rate.Limiter),
		global:   rate.NewLimiter(globalFailRate, globalFailBurst),
	}
	if token != "" {
		h := sha256.Sum256([]byte(token))
		a.tokenHash = h[:]
	}
	return a
}

// TokenRequired reports whether an admin token is set.
func (a *Auth) TokenRequired() bool { return a.tokenHash != nil }

// changes reports whether a request with this method changes something.
func changes(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// Check applies the rules to r: with a token set, r must carry it (a
// bearer token) or a session's cookie, and a change by cookie must carry
// the session's CSRF token; with none, r may read and not change. The
// *Error says why not: 401 (no or wrong credential), 403 (read-only, or no
// CSRF token), 429 (too many failures).
func (a *Auth) Check(r *http.Request) (Access, *Error) {
	acc, s, err := a.identify(r)
	switch {
	case err != nil:
		return Access{}, err
	case !a.TokenRequired() && changes(r.Method):
		return Access{}, errReadOnly()
	case a.TokenRequired() && !acc.Authenticated:
		return Access{}, errorf(http.StatusUnauthorized,
			"this server needs its admin token: send Authorization: Bearer TOKEN, or log in (POST /api/v1/session)")
	case s != nil && changes(r.Method) && !s.csrfMatches(r):
		return Access{}, errorf(http.StatusForbidden, "a change made with the session cookie needs the session's CSRF token in %s", CSRFHeader)
	}
	return acc, nil
}

func errReadOnly() *Error {
	return errorf(http.StatusForbidden, "read-only: the server has no admin token (--admin-token), so nothing can be changed")
}

// Middleware lets a request through to next when Check allows it, and
// otherwise answers it with the JSON error. The console wraps its
// handlers in it.
func (a *Auth) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := a.Check(r); err != nil {
			WriteError(w, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// identify finds the credential r carries: a bearer token first, else the
// session cookie. With no token set every request is anonymous. A
// credential that does not match is a failed attempt: counted against
// the remote and logged (sampled). While the remote is over its limit,
// any credential is answered 429 unexamined. s is the session of a
// request authenticated by cookie.
func (a *Auth) identify(r *http.Request) (acc Access, s *session, err *Error) {
	if !a.TokenRequired() {
		return Access{}, nil, nil
	}
	bearer, hasBearer, err := bearerToken(r)
	if err != nil {
		return Access{}, nil, err
	}
	cookie, cookieErr := r.Cookie(SessionCookie)
	if !hasBearer && cookieErr != nil {
		return Access{}, nil, nil
	}
	ip := remoteIP(r)
	if wait := a.blocked(ip); wait > 0 {
		a.logFailure(r, "rate limited")
		return Access{}, nil, &Error{Status: http.StatusTooManyRequests,
			Message: "admin: too many failed attempts from this address; try again later", RetryAfter: wait}
	}
	full := Access{Authenticated: true, Changes: true, Bodies: true}
	if hasBearer {
		if !a.tokenMatches(bearer) {
			a.fail(r, ip, "wrong admin token")
			return Access{}, nil, errorf(http.StatusUnauthorized, "wrong admin token")
		}
		return full, nil, nil
	}
	if s = a.lookupSession(cookie.Value); s == nil {
		a.fail(r, ip, "unknown or expired session")
		return Access{}, nil, errorf(http.StatusUnauthorized, "unknown or expired session: log in again")
	}
	full.Session = true
	return full, s, nil
}

// bearerToken reads an Authorization header: ok is false without one, and
// a header of another scheme is refused.
func bearerToken(r *http.Request) (token string, ok bool, err *Error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false, nil
	}
	scheme, token, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false, errorf(http.StatusUnauthorized, "the Authorization header must be Bearer TOKEN")
	}
	return strings.TrimSpace(token), true, nil
}

func (a *Auth) tokenMatches(token string) bool {
	h := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(h[:], a.tokenHash) == 1
}

// remoteIP is the address r came from, without its port. Forwarding
// headers are not believed: anyone could set them.
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// blocked is how long ip must wait before its credentials are looked at
// again; 0 when they may be now.
func (a *Auth) blocked(ip string) time.Duration {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	wait := func(l *rate.Limiter) time.Duration {
		tokens := l.TokensAt(now)
		if tokens >= 1 {
			return 0
		}
		return time.Duration((1 - tokens) / float64(l.Limit()) * float64(time.Second))
	}
	w := wait(a.global)
	if l := a.limited[ip]; l != nil {
		w = max(w, wait(l))
	}
	return w
}

// fail counts a failed attempt from ip and logs it.
func (a *Auth) fail(r *http.Request, ip, reason string) {
	now := a.now()
	a.mu.Lock()
	a.global.AllowN(now, 1)
	l := a.limited[ip]
	if l == nil {
		if len(a.limited) >= maxLimited {
			a.forgetIdleLocked(now)
		}
		if len(a.limited) < maxLimited {
			l = rate.NewLimiter(rate.Every(failEvery), failBurst)
			a.limited[ip] = l
		}
	}
	if l != nil {
		l.AllowN(now, 1)
	}
	a.mu.Unlock()
	a.logFailure(r, reason)
}

// forgetIdleLocked drops the remotes whose limit has filled up again: they
// are as if they had never failed. a.mu must be held.
func (a *Auth) forgetIdleLocked(now time.Time) {
	for ip, l := range a.limited {
		if l.TokensAt(now) >= failBurst {
			delete(a.limited, ip)
		}
	}
}

// logFailure logs a failed or refused attempt at warn, at most once per
// failLogEvery, with how many were left out since; never the credential.
func (a *Auth) logFailure(r *http.Request, reason string) {
	now := a.now()
	a.failMu.Lock()
	if !a.failLogged.IsZero() && now.Sub(a.failLogged) < failLogEvery {
		a.failQuiet++
		a.failMu.Unlock()
		return
	}
	quiet := a.failQuiet
	a.failLogged, a.failQuiet = now, 0
	a.failMu.Unlock()
	a.log.Warn().Str("remote", r.RemoteAddr).Str("method", r.Method).Str("path", r.URL.Path).
		Str("reason", reason).Int("not_logged_since_last", quiet).Msg("admin API: authentication failed")
}

// newSession opens a session and returns its cookie value.
func (a *Auth) newSession() (id string, s *session) {
	now := a.now()
	id = randomToken()
	s = &session{csrf: randomToken(), expires: now.Add(a.ttl)}
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, old := range a.sessions {
		if !now.Before(old.expires) {
			delete(a.sessions, k)
		}
	}
	if len(a.sessions) >= maxSessions {
		var oldest [sha256.Size]byte
		var first *session
		for k, old := range a.sessions {
			if first == nil || old.expires.Before(first.expires) {
				oldest, first = k, old
			}
		}
		delete(a.sessions, oldest)
	}
	a.sessions[sha256.Sum256([]byte(id))] = s
	return id, s
}

// lookupSession looks up a cookie's session; nil if unknown or expired. The map
// is keyed by the value's hash, so its lookup's timing says nothing of the
// values that exist.
func (a *Auth) lookupSession(id string) *session {
	key := sha256.Sum256([]byte(id))
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[key]
	if s != nil && !now.Before(s.expires) {
		delete(a.sessions, key)
		s = nil
	}
	return s
}

func (a *Auth) endSession(id string) {
	key := sha256.Sum256([]byte(id))
	a.mu.Lock()
	delete(a.sessions, key)
	a.mu.Unlock()
}

// csrfMatches reports whether r carries the session's CSRF token, in the
// header or, from a form, in its field.
func (s *session) csrfMatches(r *http.Request) bool {
	got := r.Header.Get(CSRFHeader)
	if got == "" && strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		got = r.PostFormValue(CSRFField)
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) == 1
}

// randomToken is 256 random bits, URL-safe.
func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux or macOS
	return base64.RawURLEncoding.EncodeToString(b[:])
}
