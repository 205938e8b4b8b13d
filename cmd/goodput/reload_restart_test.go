package main

import (
	"bytes"
	"log"
	"os"
	"strings"
	"testing"
)

// A reload applies the tenants alone: settings edited beside them are
// named in its log line as taking effect at the next start (an operator's
// probe changed upstream, listen, a class's bound and the limits backend,
// and the reload said only "reloaded"), and a tenant given a class new to
// the file is refused with why. A flag or a default that changed a
// setting at start is no edit of the file.
func TestReloadNamesTheSettingsItDoesNotApply(t *testing.T) {
	f, acme := newReloadFixture(t)
	f.cfg.Listen, f.cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0" // as flags and defaults do
	var out bytes.Buffer
	r := &reloader{cfg: f.cfg, store: f.store, judger: f.judger, labels: f.labels, logger: log.New(&out, "", 0)}
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(f.path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The file as it was: nothing to say.
	if err := r.reload(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "changed in the file") {
		t.Fatalf("an unchanged file: %q", out.String())
	}
	out.Reset()
	edited := "upstream: http://127.0.0.1:1\nlisten: 127.0.0.1:9\n" +
		strings.Replace(slosYAML, "ttft: 200ms", "ttft: 100ms", 1) + tenantsYAML(acme)
	write(edited)
	if err := r.reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "reload: upstream, listen, slos changed in the file; a reload applies the tenants alone, and these take effect at the next start") {
		t.Fatalf("log %q", out.String())
	}
	// A class new to the file, given to a tenant: refused, with why.
	write(strings.Replace(slosYAML, "slos:\n", "slos:\n  strict: {ttft: 50ms, objective: 0.99}\n", 1) +
		strings.Replace(tenantsYAML(acme), "slo: interactive", "slo: strict", 1))
	err := r.reload()
	if err == nil || !strings.Contains(err.Error(), `"strict" is not one of the classes in slos`) ||
		!strings.Contains(err.Error(), "classes added to slos take effect at the next start") {
		t.Fatalf("reload: %v", err)
	}
}
