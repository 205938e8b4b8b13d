package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/goodput/goodput/identity"
)

// A key's part after gp- pasted into the wrong field is redacted from the
// configuration's errors by the digest its files hold: also for a file
// read once (a pipe), one in UTF-16, one whose YAML does not parse (the
// digest then in its tenants file), and from a label value cut short
// (found by a review: each of these quoted it).
func TestErrorsRedactAKeyWithoutItsPrefix(t *testing.T) {
	key, sum, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	body := key[len("gp-"):]
	dir := t.TempDir()
	tenants := func(field string) string {
		return "tenants:\n  - name: acme\n" + field + "    keys:\n      - id: k\n        sha256: \"" + sum + "\"\n"
	}
	slos := "slos: {interactive: {ttft: 500ms, objective: 0.99}}\n"
	check := func(name string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if msg := err.Error(); strings.Contains(msg, body[:16]) || !strings.Contains(msg, "[redacted]") {
			t.Errorf("%s: %s", name, msg)
		}
	}

	// Read once: a pipe's bytes, not a second read, hold the digest.
	_, err = load("/dev/stdin", []byte(slos+tenants("    slo: "+body+"\n")), false)
	check("read once", err)

	// UTF-16 (what PowerShell's > writes): only the parsed scalar is the
	// digest.
	u16 := utf16.Encode([]rune(slos + tenants("    slo: "+body+"\n")))
	b := []byte{0xff, 0xfe}
	for _, r := range u16 {
		b = append(b, byte(r), byte(r>>8))
	}
	p := filepath.Join(dir, "u16.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(p)
	check("UTF-16", err)

	// YAML that does not parse, the digest in its tenants file.
	if err := os.WriteFile(filepath.Join(dir, "ten.yaml"), []byte(tenants("")), 0o644); err != nil {
		t.Fatal(err)
	}
	p = filepath.Join(dir, "broken.yaml")
	if err := os.WriteFile(p, []byte(slos+"tenants_file: ten.yaml\n"+body+": 1\n"+body+": 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(p)
	check("broken YAML", err)

	// A label value longer than a label may be is quoted cut, never
	// within a key's characters.
	_, err = load("/dev/stdin", []byte(slos+"labels: {models: [\""+strings.Repeat("m", 240)+" "+body+"\\u200b\"]}\n"+tenants("")), false)
	if err == nil || strings.Contains(err.Error(), body[:8]) || !strings.Contains(err.Error(), `"`+strings.Repeat("m", 240)+` "…`) {
		t.Errorf("label value: %v, want its first bytes quoted up to the key's", err)
	}

	// A valid configuration's RedactKeys finds the key in what it is given
	// (a warning that quotes the file), with the tenants file's digests.
	p = filepath.Join(dir, "ok.yaml")
	if err := os.WriteFile(p, []byte(slos+"tenants_file: ten.yaml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RedactKeys("labels: tenants lists " + body + " and " + key); strings.Contains(got, body[:16]) {
		t.Errorf("RedactKeys: %s", got)
	}
	var none *Config
	if got := none.RedactKeys("x " + key); strings.Contains(got, body[:16]) {
		t.Errorf("a nil configuration's RedactKeys: %s", got)
	}
}
