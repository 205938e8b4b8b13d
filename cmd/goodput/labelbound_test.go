package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/goodput/goodput/internal/config"
	"github.com/goodput/goodput/ratelimit"
)

// With gateway keys, labels: tenants bounds the tenant label values as it
// does without keys: a tenant it leaves out counts under other in every
// metric, the rate limiter's included, also after a reload. It was
// ignored: every tenant had its own series (20,000 tenants: 200,000
// series of the rate limiter before any request, 2.3 million and a
// 217 MB scrape once half of them had sent one).
func TestLabelsTenantsBoundSeriesWithKeys(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "goodput.yaml")
	acmeKey, acme := newKey(t, "acme", "acme-one")
	betaKey, beta := newKey(t, "beta", "beta-one")
	tenants := slosYAML + "labels: {tenants: [acme]}\n" + tenantsYAML(acme) +
		"    limits: {rpm: 600}\n  - name: beta\n    limits: {rpm: 600}\n    keys:\n" + beta
	if err := os.WriteFile(path, []byte(tenants), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	s, logs := startServe(t, cfg)
	base, metrics := "http://"+s.Proxy, "http://"+s.Admin+"/metrics"
	check := func(when string, n float64) {
		t.Helper()
		text := scrape(t, metrics)
		if strings.Contains(text, `tenant="beta"`) {
			i := strings.Index(text, `tenant="beta"`)
			t.Fatalf("%s: a series of beta, which labels: tenants leaves out: %q", when, text[max(0, strings.LastIndex(text[:i], "\n")):i+20])
		}
		for _, c := range []struct {
			name string
			sel  []string
		}{
			{"goodput_requests_total", []string{`tenant="other"`, `outcome="ok"`}},
			{"goodput_requests_total", []string{`tenant="acme"`, `outcome="ok"`}},
			{"goodput_ratelimit_decisions_total", []string{`tenant="other"`, `decision="allowed"`}},
			{"goodput_ratelimit_decisions_total", []string{`tenant="acme"`, `decision="allowed"`}},
		} {
			if got := sumWhere(text, c.name, c.sel...); got != n {
				t.Errorf("%s: %s%v = %v, want %v", when, c.name, c.sel, got, n)
			}
		}
	}
	for _, key := range []string{acmeKey, betaKey} {
		if st, body := chatReq(t, base, key, nil, smallChat); st != 200 {
			t.Fatalf("%d %s", st, body)
		}
	}
	waitFor(t, func() bool { return sumWhere(scrape(t, metrics), "goodput_requests_total") == 2 })
	check("at start", 1)

	// A reload (beta's limit changed) keeps the label values listed.
	if err := os.WriteFile(path, []byte(strings.Replace(tenants, "rpm: 600}\n    keys:\n"+beta, "rpm: 700}\n    keys:\n"+beta, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, func() bool { return strings.Contains(logs.String(), "reloaded: 2 tenants") })
	for _, key := range []string{acmeKey, betaKey} {
		if st, body := chatReq(t, base, key, nil, smallChat); st != 200 {
			t.Fatalf("after the reload: %d %s", st, body)
		}
	}
	waitFor(t, func() bool { return sumWhere(scrape(t, metrics), "goodput_requests_total") == 4 })
	check("after a reload", 2)
}

// With labels: tenants and gateway keys, the log says how many tenants
// have a label value of their own, and names the listed ones that are no
// tenant (an upgrade from a build that ignored the list merged the others
// into other without a word; found by review).
func TestLabelsNote(t *testing.T) {
	ts := []ratelimit.TenantConfig{{Name: "acme"}, {Name: "beta"}, {Name: "gamma"}}
	if got := labelsNote(nil, ts); got != nil {
		t.Errorf("no list: %q", got)
	}
	got := labelsNote([]string{"acme", "acem"}, ts)
	want := []string{
		"labels: tenants: 1 of 3 tenants have a label value of their own; the others count under other in every metric",
		"WARNING: labels: tenants lists acem, which is no tenant",
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %q\nwant %q", got, want)
	}
}
