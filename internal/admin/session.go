package admin

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"time"
)

// maxLoginBody bounds a login request's body.
const maxLoginBody = 4 << 10

// sessionState is GET /api/v1/session's answer, and a login's.
type sessionState struct {
	// TokenRequired: the server has an admin token; without one the API
	// is read-only and needs no login.
	TokenRequired bool `json:"token-required"`
	Authenticated bool `json:"authenticated"`
	// Via is "bearer" or "session" when authenticated.
	Via     string `json:"via,omitempty"`
	Changes bool   `json:"changes"`
	Bodies  bool   `json:"bodies"`
	// CSRFToken and Expires are the session's, when authenticated by its
	// cookie: a console that reloads learns its CSRF token again here.
	CSRFToken string     `json:"csrf-token,omitempty"`
	Expires   *time.Time `json:"expires,omitempty"`
}

// getSession says whether the request is authenticated and what it may
// do. A credential that does not match still counts as a failed attempt
// (this is no free oracle for guesses), but is answered 200, with the
// stale cookie cleared.
func (a *API) getSession(w http.ResponseWriter, r *http.Request, _ Access) error {
	acc, s, err := a.auth.identify(r)
	if err != nil && err.Status != http.StatusUnauthorized {
		return err
	}
	if err != nil {
		clearSessionCookie(w, r)
	}
	WriteValue(w, http.StatusOK, a.auth.state(acc, s))
	return nil
}

func (a *Auth) state(acc Access, s *session) sessionState {
	st := sessionState{
		TokenRequired: a.TokenRequired(),
		Authenticated: acc.Authenticated,
		Changes:       acc.Changes,
		Bodies:        acc.Bodies,
	}
	switch {
	case s != nil:
		st.Via, st.CSRFToken, st.Expires = "session", s.csrf, &s.expires
	case acc.Authenticated:
		st.Via = "bearer"
	}
	return st
}

// login opens a session for the admin token, given as {"token": "..."} or
// as the form field token: it sets the session cookie (HttpOnly,
// SameSite=Strict, Path=/) and answers with the CSRF token that changes
// made with the cookie must carry.
func (a *API) login(w http.ResponseWriter, r *http.Request, _ Access) error {
	if !a.auth.TokenRequired() {
		return errReadOnly()
	}
	ip := remoteIP(r)
	if wait := a.auth.blocked(ip); wait > 0 {
		a.auth.logFailure(r, "rate limited")
		return &Error{Status: http.StatusTooManyRequests,
			Message: "admin: too many failed attempts from this address; try again later", RetryAfter: wait}
	}
	token, err := loginToken(w, r)
	if err != nil {
		return err
	}
	if !a.auth.tokenMatches(token) {
		a.auth.fail(r, ip, "wrong admin token at login")
		return errorf(http.StatusUnauthorized, "wrong admin token")
	}
	id, s := a.auth.newSession()
	http.SetCookie(w, &http.Cookie{
		Name:     SessionCookie,
		Value:    id,
		Path:     "/",
		MaxAge:   int(a.auth.ttl / time.Second),
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
		Secure:   r.TLS != nil,
	})
	WriteValue(w, http.StatusOK, a.auth.state(Access{Authenticated: true, Session: true, Changes: true, Bodies: true}, s))
	return nil
}

// loginToken reads the token of a login request.
func loginToken(w http.ResponseWriter, r *http.Request) (string, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "application/x-www-form-urlencoded" {
		if err := r.ParseForm(); err != nil {
			if e := tooLarge(err); e != nil {
				return "", e
			}
			return "", errorf(http.StatusBadRequest, "bad form: %v", err)
		}
		return r.PostForm.Get("token"), nil
	}
	var req struct {
		Token string `json:"token"`
	}
	if err := decodeJSON(r.Body, &req); err != nil {
		return "", err
	}
	if req.Token == "" {
		return "", errorf(http.StatusBadRequest, `give the admin token as {"token": "..."}`)
	}
	return req.Token, nil
}

// logout ends the request's session, if it has one, and clears the
// cookie. It needs no CSRF token: SameSite=Strict keeps the cookie off
// other sites' requests, and the worst a forged logout does is log out.
func (a *API) logout(w http.ResponseWriter, r *http.Request, _ Access) error {
	if c, err := r.Cookie(SessionCookie); err == nil {
		a.auth.endSession(c.Value)
	}
	clearSessionCookie(w, r)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

// decodeJSON reads one JSON object into v, refusing unknown fields (a
// misspelt field would otherwise be silently ignored) and anything after
// the object. A body over its MaxBytesReader limit is 413.
func decodeJSON(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		if e := tooLarge(err); e != nil {
			return e
		}
		return errorf(http.StatusBadRequest, "bad JSON body: %v", err)
	}
	// Only white space may follow the object: dec.More reports a stray
	// } or ] as the end of a value, not as more of them.
	if _, err := dec.Token(); err != io.EOF {
		if e := tooLarge(err); e != nil {
			return e
		}
		return errorf(http.StatusBadRequest, "bad JSON body: something after the object")
	}
	return nil
}

// tooLarge is the 413 of a body read past its MaxBytesReader limit, a
// JSON body's or a form's; nil for any other error.
func tooLarge(err error) *Error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return errorf(http.StatusRequestEntityTooLarge, "request body over %d bytes", tooBig.Limit)
	}
	return nil
}
