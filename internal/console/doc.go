// Package console is Sprout's web console: HTML pages at / of the side port
// (--http; internal/ops mounts Handler for every path it does not serve
// itself), for an operator with a browser. It is a client of the admin API
// (internal/admin, under /api/v1) and of nothing else: every figure it
// shows and every change it makes goes through that API, with the API's
// rules of access, so the console adds no way in.
//
// # Pages
//
//	/                 overview: the server's figures, a chart of its jobs by
//	                  state and of puts and deletes a second over the last
//	                  hour, and the tubes table, sortable and filterable by
//	                  name (kept in the query: ?q=NAME&sort=KEY&desc=1)
//	/tubes/{name}     a tube: its counts by state, its charts, its jobs by
//	                  state a page at a time, and the actions: put, kick,
//	                  pause, clear, and delete or kick a listed job
//	/jobs/{id}        a job: its stats-job figures, its body (text, pretty
//	                  JSON, or a hex dump and the base64 of a binary body),
//	                  and delete or kick
//	/static/...       the scripts, styles and uPlot, embedded in the binary
//
// A tube's name is one path segment, escaped as the API wants it:
// encodeURIComponent, so a '/' is %2F. A tube named "." or ".." cannot be
// reached from a browser at all: the URL standard folds those segments
// (%2E included) before a request is sent, so its page says so rather than
// act on the path the browser would make of it.
//
// # How data flows
//
// There is no build step and no Node: the pages are html/template shells
// rendered by Go, and one script (static/console.js) fills them with
// fetch() calls to /api/v1, as JSON. Nothing else is rendered with data on
// the server, so a page is the same for every visitor and the API stays the
// only place that decides what may be shown. The script polls: the
// overview's figures and tubes every 2 s, a tube's figures every 2 s, the
// charts' history every 5 s with ?since= so that only new points come; a
// tab that is hidden stops polling and catches up when shown again. Job
// listings are fetched when asked for (a state, a page, after an action),
// not polled, so a list does not move under the keyboard. The charts are
// uPlot 1.6.32 (MIT, static/vendor/uplot, committed as released).
//
// Static files are served with a hash of their content in the query
// (?v=HASH) and cached for a year when it matches, and gzipped once, at
// their first request, for clients that take gzip. Pages are answered no-store.
//
// # In a cluster
//
// Every member serves the console itself (Config.Cluster): its pages and
// static files are the same everywhere, and its fetches go to the
// member's own /api/v1, which forwards them to the leader
// (internal/admin/doc.go, Cluster mode), so the console works whichever
// member the browser opened, with a session opened on that member. The
// header shows the member and the leader, from GET /cluster (open, like
// /metrics), polled every 5 s. The Cluster page (/members) shows the
// rest of GET /cluster, polled every 2 s: the members as this one sees
// them (role, connection, the members' protocol, match index) and the
// Raft groups it runs (leader, replicas, its replica's tubes and jobs).
//
// # Access from the browser
//
// The API's rules (admin.Auth) decide, here as there:
//
//   - With no admin token the server is read-only: every page says so, the
//     API hides job bodies and refuses changes, and the console disables
//     its actions rather than offer buttons that would be refused.
//   - With a token, a page request is checked (Auth.Check) before the page
//     is rendered; without a valid session it is answered the login form
//     instead, at the same address (status 401). The form posts the token
//     to POST /api/v1/session, which sets the session's HttpOnly,
//     SameSite=Strict cookie; the page then reloads. The form posts there
//     even without the script, so a token never lands in an address. The
//     token itself is never kept by the console: not in storage, not in
//     the page.
//   - The script learns the session's CSRF token from GET /api/v1/session
//     (the cookie is HttpOnly, so it cannot read it) and sends it as
//     X-CSRF-Token with every change. A 401 from the API (the session
//     expired, or was ended elsewhere) reloads the page, which shows the
//     login form.
//   - Destructive actions (clear, delete) ask for confirmation in a modal
//     <dialog>, whose Cancel button has the focus.
//
// # Security headers
//
// Every answer carries Content-Security-Policy "default-src 'self';
// frame-ancestors 'none'; base-uri 'none'; form-action 'self';
// object-src 'none'" (no inline script or style anywhere: data reaches the
// script through data- attributes, and uPlot styles through the DOM, which
// CSP allows), X-Content-Type-Options: nosniff, Referrer-Policy:
// no-referrer, X-Frame-Options: DENY for browsers older than
// frame-ancestors, and Cross-Origin-Opener-Policy: same-origin. The
// script builds the DOM with textContent, never innerHTML, so a tube's
// name or a job's body is text wherever it is shown.
//
// # Keyboard and small screens
//
// Everything is a real link or button with a visible focus ring; sort
// headers are buttons with aria-sort; action results and errors are
// announced through an aria-live region; inputs have labels. The layout is
// one column at 390 px and wider at 1280 px; tables scroll sideways in
// their own box, with the first column kept in view.
package console
