package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/goodput/goodput/dashboards/web"
	"github.com/goodput/goodput/internal/config"
)

// serve mounts the live page on the admin listener's "/" without taking
// any other route: /metrics and the API still answer, other paths are 404.
func TestAdminServesLivePage(t *testing.T) {
	cfg := &config.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0"}
	embeddedDefaults(cfg)
	gw, _ := startServe(t, cfg)
	base := "http://" + gw.Admin
	for _, c := range []struct {
		path, want string
		status     int
	}{
		{"/", `<script src="assets/app.js"`, 200},
		{"/assets/app.js", "admin/api/slo", 200},
		{"/admin/api/slo", `"tenants":`, 200},
		{"/metrics", "goodput_upstream_up", 200},
		{"/healthz", "ok", 200},
		{"/favicon.ico", "", 404},
	} {
		resp, err := http.Get(base + c.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.want) {
			t.Errorf("GET %s: %d, want %d with %q:\n%.300s", c.path, resp.StatusCode, c.status, c.want, b)
		}
		if strings.HasPrefix(c.path, "/assets/") || c.path == "/" {
			if got := resp.Header.Get("Content-Security-Policy"); got != web.ContentSecurityPolicy {
				t.Errorf("GET %s: CSP %q", c.path, got)
			}
		}
	}
}
