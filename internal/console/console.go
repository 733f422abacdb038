package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/internal/admin"
)

//go:embed templates/*.html
var templateFS embed.FS

// Config is what New needs.
type Config struct {
	// Auth is the admin API's rules of access (admin.API.Auth): the
	// console shows a page only to a request the API would answer.
	Auth *admin.Auth
	// Cluster: the server is a cluster member, whose pages show which
	// member they come from and which one leads (from GET /cluster).
	Cluster bool
	Logger  zerolog.Logger
}

// Console is the web console's handler, for every path of the side port
// that nothing else serves (see doc.go).
type Console struct {
	auth    *admin.Auth                   // immutable
	cluster bool                          // immutable
	log     zerolog.Logger                // immutable
	pages   map[string]*template.Template // immutable: by page name
	static  *assets                       // immutable
	mux     *http.ServeMux                // immutable
}

// Page names: each has templates/NAME.html, rendered inside layout.html.
const (
	pageOverview = "overview"
	pageTube     = "tube"
	pageJob      = "job"
	pageLogin    = "login"
	pageError    = "error"
	pageCluster  = "cluster"
)

// New makes the console: it parses its templates and compresses its static
// files once, here.
func New(cfg Config) (*Console, error) {
	static, err := loadAssets()
	if err != nil {
		return nil, err
	}
	c := &Console{auth: cfg.Auth, cluster: cfg.Cluster, log: cfg.Logger, static: static, pages: make(map[string]*template.Template)}
	funcs := template.FuncMap{"asset": static.url}
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	for _, name := range []string{pageOverview, pageTube, pageJob, pageLogin, pageError, pageCluster} {
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		c.pages[name] = t
	}
	c.mux = http.NewServeMux()
	c.mux.HandleFunc("GET /{$}", c.overview)
	c.mux.HandleFunc("GET /tubes/{name}", c.tube)
	c.mux.HandleFunc("GET /jobs/{id}", c.job)
	if c.cluster {
		// Not /cluster: that is the member's JSON, which this page reads.
		c.mux.HandleFunc("GET /members", c.clusterPage)
	}
	c.mux.Handle("GET /static/", http.StripPrefix("/static/", static))
	c.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			c.renderError(w, http.StatusMethodNotAllowed, "The console's pages are only read (GET).")
			return
		}
		c.renderError(w, http.StatusNotFound, "There is no page at "+r.URL.Path+".")
	})
	return c, nil
}

// ServeHTTP answers a request for a page or a static file, with the
// security headers of doc.go on every answer.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	c.mux.ServeHTTP(w, r)
}

// contentSecurityPolicy allows the console's own scripts, styles and
// fetches, and nothing inline, nothing framed, nothing posted elsewhere.
const contentSecurityPolicy = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"

// view is what a page's template is given. The script reads what it needs
// of it from data- attributes: no page carries data inline in a script.
type view struct {
	Page  string
	Title string
	// Mode is "read-only" (no admin token), "session" (logged in with the
	// cookie) or "bearer" (a request with the token in its header, as a
	// tool might send).
	Mode string
	// Charts: the page loads uPlot.
	Charts bool
	// Cluster: the page shows the member and the leader.
	Cluster bool
	Tube    string
	JobID   uint64
	// Status and Message are an error page's.
	Status  int
	Message string
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, view{Page: pageOverview, Title: "Overview", Charts: true})
}

func (c *Console) clusterPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, view{Page: pageCluster, Title: "Cluster"})
}

func (c *Console) tube(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	c.render(w, r, view{Page: pageTube, Title: "Tube " + name, Tube: name, Charts: true})
}

func (c *Console) job(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		c.renderError(w, http.StatusNotFound, "A job's id is a whole number from 1, not "+strconv.Quote(r.PathValue("id"))+".")
		return
	}
	c.render(w, r, view{Page: pageJob, Title: "Job " + strconv.FormatUint(id, 10), JobID: id})
}

// render answers a page when the API's rules let r in, the login form when
// they want a token that r lacks, and an error page otherwise (too many
// failed attempts).
func (c *Console) render(w http.ResponseWriter, r *http.Request, v view) {
	acc, err := c.auth.Check(r)
	switch {
	case err != nil && err.Status == http.StatusUnauthorized:
		c.write(w, http.StatusUnauthorized, view{Page: pageLogin, Title: "Log in", Mode: "login"})
		return
	case err != nil:
		err.SetRetryAfter(w.Header())
		c.renderError(w, err.Status, strings.TrimPrefix(err.Message, "admin: "))
		return
	}
	switch {
	case !c.auth.TokenRequired():
		v.Mode = "read-only"
	case acc.Session:
		v.Mode = "session"
	default:
		v.Mode = "bearer"
	}
	c.write(w, http.StatusOK, v)
}

func (c *Console) renderError(w http.ResponseWriter, status int, msg string) {
	c.write(w, status, view{Page: pageError, Title: http.StatusText(status), Status: status, Message: msg})
}

// write renders v into a buffer first, so that a template error is a 500
// and not half a page.
func (c *Console) write(w http.ResponseWriter, status int, v view) {
	v.Cluster = c.cluster
	var buf bytes.Buffer
	if err := c.pages[v.Page].ExecuteTemplate(&buf, "layout.html", v); err != nil {
		c.log.Error().Err(err).Str("page", v.Page).Msg("console: rendering a page")
		http.Error(w, "console: cannot render the page", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
