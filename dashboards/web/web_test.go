package web

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string, hdr map[string]string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The page and each asset it names are served, with their types, the strict
// CSP and nosniff; the page names only assets of its own.
func TestPageAndAssets(t *testing.T) {
	h := Handler()
	r := get(t, h, "GET", "/", nil)
	page := body(t, r)
	if r.StatusCode != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", r.StatusCode, r.Header.Get("Content-Type"))
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(page, -1)
	want := map[string]string{
		"assets/app.js":      "text/javascript",
		"assets/style.css":   "text/css",
		"assets/favicon.svg": "image/svg+xml",
	}
	seen := map[string]bool{}
	for _, m := range refs {
		ref := m[1]
		if strings.Contains(ref, ":") || strings.HasPrefix(ref, "/") {
			t.Errorf("the page refers to %q: only relative references (served by the gateway, under any prefix)", ref)
			continue
		}
		if ctype, ok := want[ref]; ok {
			seen[ref] = true
			a := get(t, h, "GET", "/"+ref, nil)
			if a.StatusCode != 200 || !strings.HasPrefix(a.Header.Get("Content-Type"), ctype) || len(body(t, a)) == 0 {
				t.Errorf("GET /%s: %d %q", ref, a.StatusCode, a.Header.Get("Content-Type"))
			}
		}
	}
	for ref := range want {
		if !seen[ref] {
			t.Errorf("the page does not use %s", ref)
		}
	}
	for _, p := range []string{"/", "/assets/app.js", "/assets/style.css", "/assets/favicon.svg", "/nope"} {
		r := get(t, h, "GET", p, nil)
		if got := r.Header.Get("Content-Security-Policy"); got != ContentSecurityPolicy {
			t.Errorf("%s: CSP %q", p, got)
		}
		if r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", p)
		}
	}
}

// The CSP allows nothing inline and nothing from elsewhere, and the page
// needs neither: no inline script, style or event handler, no URL of
// another host in any asset (the SVG namespace is a name, not a fetch).
func TestStrictCSPAndNoInlineCode(t *testing.T) {
	for _, d := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(ContentSecurityPolicy, d) {
			t.Errorf("CSP lacks %s", d)
		}
	}
	if strings.Contains(ContentSecurityPolicy, "unsafe") || strings.Contains(ContentSecurityPolicy, "*") {
		t.Errorf("CSP is not strict: %s", ContentSecurityPolicy)
	}
	h := Handler()
	page := body(t, get(t, h, "GET", "/", nil))
	if m := regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]+</script>|<style|\sstyle=|\son[a-z]+=|javascript:`).FindString(page); m != "" {
		t.Errorf("the page has inline code the CSP blocks: %q", m)
	}
	if !strings.Contains(page, `<script src="assets/app.js"`) {
		t.Error("the page does not load assets/app.js")
	}
	for _, p := range []string{"/", "/assets/app.js", "/assets/style.css", "/assets/favicon.svg"} {
		text := body(t, get(t, h, "GET", p, nil))
		text = strings.ReplaceAll(text, "http://www.w3.org/2000/svg", "")
		if m := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`).FindString(text); m != "" {
			t.Errorf("%s names another host: %q", p, m)
		}
		if p == "/assets/app.js" && regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function`).MatchString(text) {
			t.Errorf("app.js builds markup or code from strings (tenant names are data: use textContent)")
		}
	}
}

// Other paths are 404 (the handler is mounted on "/": it must not answer
// for every path); other methods 405; a known ETag gets 304; HEAD works.
func TestRoutesMethodsAndCaching(t *testing.T) {
	h := Handler()
	for _, p := range []string{"/index.html", "/assets/", "/assets", "/x", "/assets/app.js/", "/admin/api/slo"} {
		if r := get(t, h, "GET", p, nil); r.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", p, r.StatusCode)
		}
	}
	if r := get(t, h, "POST", "/", nil); r.StatusCode != 405 || r.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: %d, Allow %q", r.StatusCode, r.Header.Get("Allow"))
	}
	r := get(t, h, "GET", "/assets/app.js", nil)
	etag := r.Header.Get("ETag")
	if etag == "" || r.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q", etag, r.Header.Get("Cache-Control"))
	}
	if r := get(t, h, "GET", "/assets/app.js", map[string]string{"If-None-Match": etag}); r.StatusCode != 304 {
		t.Errorf("If-None-Match: %d, want 304", r.StatusCode)
	}
	if other := get(t, h, "GET", "/assets/style.css", nil).Header.Get("ETag"); other == etag {
		t.Error("two assets share an ETag")
	}
	if r := get(t, h, "HEAD", "/", nil); r.StatusCode != 200 || body(t, r) != "" || r.Header.Get("Content-Length") == "" {
		t.Errorf("HEAD /: %d", r.StatusCode)
	}
}

// Each tenant's colour in the charts and legend stands out from the
// panel's white by at least 3:1 (WCAG 2.1, 1.4.11, non-text contrast): the
// fifth tenant's yellow, #c9a100, was 2.45:1.
func TestChartColoursContrast(t *testing.T) {
	js := body(t, get(t, Handler(), "GET", "/assets/app.js", nil))
	m := regexp.MustCompile(`var PALETTE = \[([^\]]*)\]`).FindStringSubmatch(js)
	if m == nil {
		t.Fatal("no PALETTE in app.js")
	}
	colors := regexp.MustCompile(`'#([0-9a-f]{6})'`).FindAllStringSubmatch(m[1], -1)
	if len(colors) < 8 {
		t.Fatalf("PALETTE %s: want 8 colours or more", m[1])
	}
	lum := func(hex string) float64 {
		var l float64
		for i, w := range []float64{0.2126, 0.7152, 0.0722} {
			v, _ := strconv.ParseUint(hex[2*i:2*i+2], 16, 8)
			c := float64(v) / 255
			if c <= 0.03928 {
				c /= 12.92
			} else {
				c = math.Pow((c+0.055)/1.055, 2.4)
			}
			l += w * c
		}
		return l
	}
	for _, c := range colors {
		if ratio := (1 + 0.05) / (lum(c[1]) + 0.05); ratio < 3 {
			t.Errorf("#%s on white: %.2f:1, want 3:1 or more", c[1], ratio)
		}
	}
}
