// Package web serves the gateway's live page: GET / on the admin listener,
// a per-tenant table and charts of attainment, goodput, TTFT and ITL that
// the page refreshes from GET /admin/api/slo.
//
// Every asset is embedded in the binary (no CDN, nothing fetched from
// elsewhere), the script is plain JavaScript in a file of its own, and every
// response carries a strict Content-Security-Policy: scripts, styles and
// images only from the gateway itself, no inline code, requests only back to
// the gateway, no framing.
//
// The charts' history is kept by the page, not by the gateway: it samples
// the API's 5m window at each refresh and keeps what it sampled since it was
// opened (15 minutes by default). So the gateway holds no state and spends
// nothing for the page while no one has it open; the price is that a page
// starts with empty charts. Grafana (dashboards/*.json) has the long view.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"time"
)

//go:embed index.html assets
var files embed.FS

// ContentSecurityPolicy is sent with every response of the Handler.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

type asset struct {
	body  []byte
	ctype string
	etag  string
}

// Handler serves the live page at / and its assets under /assets/; any
// other path is 404, any method but GET and HEAD 405. Mount it on "/" of the
// admin mux: the mux's other routes (/metrics, /admin/api/...) take
// precedence.
func Handler() http.Handler {
	assets := map[string]*asset{}
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ctype := mime.TypeByExtension(path.Ext(p))
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		url := "/" + p
		if p == "index.html" {
			url = "/"
		}
		assets[url] = &asset{body: b, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic("web: embedded assets: " + err.Error()) // cannot happen: they are compiled in
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		a, ok := assets[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.Set("Content-Type", a.ctype)
		// Revalidate every time (a cheap 304): a new gateway's page is
		// never mixed with an old script.
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
	})
}
