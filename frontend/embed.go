// Package frontend holds Airlock's web UI. Vite builds it into dist/ (make
// frontend); the binaries that show it embed that folder: the desktop app,
// and `airlock serve --http`, which serves it next to the control API.
package frontend

import (
	"bytes"
	"embed"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// Dist is the built UI. In a fresh clone it holds only dist/.gitkeep.
//
//go:embed all:dist
var Dist embed.FS

// Handler serves the UI from Dist.
func Handler() http.Handler {
	sub, err := fs.Sub(Dist, "dist")
	if err != nil {
		panic(err) // "dist" is a valid path: cannot happen
	}
	return NewHandler(sub)
}

// NewHandler serves the UI from fsys: its files as they are, and
// index.html for any other path without a file extension, so a reload on
// a screen's address works. Without an index.html (the UI was not built)
// it answers 503 with how to build it.
func NewHandler(fsys fs.FS) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		setSecurityHeaders(w.Header())
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if name == "" || name == "index.html" {
			serveIndex(w, r, fsys)
			return
		}
		f, err := fsys.Open(name)
		if err != nil {
			if path.Ext(name) != "" {
				// A missing asset must not come back as HTML.
				http.NotFound(w, r)
				return
			}
			serveIndex(w, r, fsys)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil || st.IsDir() {
			serveIndex(w, r, fsys)
			return
		}
		rs, ok := f.(io.ReadSeeker)
		if !ok {
			http.Error(w, "unreadable asset", http.StatusInternalServerError)
			return
		}
		if strings.HasPrefix(name, "assets/") {
			// Vite puts a content hash in these names.
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		}
		http.ServeContent(w, r, name, st.ModTime(), rs)
	})
}

func serveIndex(w http.ResponseWriter, r *http.Request, fsys fs.FS) {
	b, err := fs.ReadFile(fsys, "index.html")
	if errors.Is(err, fs.ErrNotExist) {
		http.Error(w, "The Airlock web UI was not built into this binary: run `make frontend`, then rebuild (make airlock).", http.StatusServiceUnavailable)
		return
	}
	if err != nil {
		http.Error(w, "cannot read index.html", http.StatusInternalServerError)
		return
	}
	// The page may carry the API token in its address: never cache it.
	w.Header().Set("Cache-Control", "no-store")
	http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(b))
}

// setSecurityHeaders keeps the page from being framed, from loading code
// from anywhere else, and from sending its address (with the token) on.
func setSecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}
