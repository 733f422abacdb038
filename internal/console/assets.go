package console

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
)

// The files under /static/: the console's own, and uPlot's as released
// (its LICENSE is served too; its README, which says where it came from,
// is not).
//
//go:embed static/*.js static/*.css static/*.svg static/vendor/uplot/*.js static/vendor/uplot/*.css static/vendor/uplot/LICENSE
var staticFS embed.FS

// asset is one static file, ready to send.
type asset struct {
	body        []byte
	contentType string
	hash        string // of body: the ?v= of its URL, and its ETag
	// gzipped is body gzipped, made at its first request rather than at
	// start (over 100 ms of a member's start under -race); nil when gzip
	// would not make it smaller.
	gzipOnce sync.Once
	gzipped  []byte
}

// gzip returns the file gzipped, nil if that is no smaller.
func (f *asset) gzip() []byte {
	f.gzipOnce.Do(func() {
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression) // the level is valid
		_, _ = zw.Write(f.body)                                 // a bytes.Buffer does not fail
		_ = zw.Close()
		if gz.Len() < len(f.body) {
			f.gzipped = gz.Bytes()
		}
	})
	return f.gzipped
}

// assets are the static files by path under static/. It is immutable
// after loadAssets.
type assets struct {
	files map[string]*asset
}

// loadAssets reads the embedded files and hashes them.
func loadAssets() (*assets, error) {
	a := &assets{files: make(map[string]*asset)}
	err := fs.WalkDir(staticFS, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := staticFS.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		f := &asset{body: body, hash: hex.EncodeToString(sum[:6]), contentType: contentType(p)}
		a.files[strings.TrimPrefix(p, "static/")] = f
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("console: reading the static files: %w", err)
	}
	return a, nil
}

func contentType(p string) string {
	if path.Base(p) == "LICENSE" {
		return "text/plain; charset=utf-8"
	}
	if t := mime.TypeByExtension(path.Ext(p)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// url is the address of the static file name with its hash, for the
// templates ({{asset "console.js"}}). A name that is not embedded is a
// template error, found when the page is first rendered in a test.
func (a *assets) url(name string) (string, error) {
	f := a.files[name]
	if f == nil {
		return "", fmt.Errorf("console: no static file %q", name)
	}
	return "/static/" + name + "?v=" + f.hash, nil
}

// ServeHTTP sends a static file (its path with /static/ stripped). Asked
// for with the current hash, it may be cached for a year: the next
// version has another URL. Otherwise it must be revalidated (ETag).
func (a *assets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := a.files[r.URL.Path]
	if f == nil {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	etag := `"` + f.hash + `"`
	h.Set("ETag", etag)
	h.Set("Vary", "Accept-Encoding")
	if r.URL.Query().Get("v") == f.hash {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && strings.Contains(inm, etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", f.contentType)
	body := f.body
	if gz := f.gzip(); gz != nil && acceptsGzip(r) {
		body = gz
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}

// acceptsGzip reports whether r's Accept-Encoding takes gzip (without
// q=0).
func acceptsGzip(r *http.Request) bool {
	for part := range strings.SplitSeq(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		q := strings.ReplaceAll(params, " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}
