package keyshape

import (
	"strings"
	"testing"

	"github.com/goodput/goodput/internal/testenv"
)

func TestRedact(t *testing.T) {
	key := Prefix + strings.Repeat("aB3_-", 8) + "xyz" // 43 characters, as identity makes them
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"no key here", "no key here"},
		{"invalid input: my key is " + key, "invalid input: my key is " + Redacted},
		{key + " and " + key + ".", Redacted + " and " + Redacted + "."},
		{"gp-short1234 stays", "gp-short1234 stays"}, // under 16 characters: not a key's shape
		{"gp-gp-" + key[3:], Redacted},               // "-" is base64url: one run from the first gp-
		{"tail " + Prefix + "0123456789abcdef", "tail " + Redacted},
	} {
		got := Redact(c.in)
		if got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
		if Holds([]byte(got)) {
			t.Errorf("Redact(%q) = %q still holds a key's shape", c.in, got)
		}
	}
	if n := testenv.AllocsPerRun(100, func() { _ = Redact("upstream status 500: nothing to hide, gp-short") }); n != 0 {
		t.Errorf("Redact of a message without a key allocates %v times", n)
	}
}

// HoldsWhole and RedactWhole take only a whole key (Prefix and BodyLen
// base64url characters) for one: a host, a file or a model named
// gp-something is left as it is.
func TestWhole(t *testing.T) {
	key := Prefix + strings.Repeat("aB3", BodyLen/3) + "x"
	if len(key) != len(Prefix)+BodyLen {
		t.Fatalf("test key of %d characters", len(key))
	}
	for _, v := range []string{key, "x " + key + ".", "slo: " + key + "tail"} {
		if !HoldsWhole([]byte(v)) {
			t.Errorf("HoldsWhole(%q) = false", v)
		}
		if got := RedactWhole(v); strings.Contains(got, key[3:19]) || !strings.Contains(got, Redacted) {
			t.Errorf("RedactWhole(%q) = %q", v, got)
		}
	}
	for _, v := range []string{key[:len(key)-1], "http://gp-vllm-production-east:8000", "acme/gp-finetuned-support-v2", "/etc/goodput/gp-tenants-production.yaml"} {
		if HoldsWhole([]byte(v)) {
			t.Errorf("HoldsWhole(%q) = true", v)
		}
		if got := RedactWhole(v); got != v {
			t.Errorf("RedactWhole(%q) = %q", v, got)
		}
	}
	if !Holds([]byte(key[:len(Prefix)+16])) || Holds([]byte(key[:len(Prefix)+15])) {
		t.Error("Holds no longer takes 16 characters for a fragment")
	}
}
