package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	if got := Text("short", Max); got != "short" {
		t.Errorf("%q", got)
	}
	got := Text(strings.Repeat("é", 400), Max) // 800 bytes
	if !utf8.ValidString(got) || len(got) > Max+len("…") || !strings.HasSuffix(got, "…") {
		t.Errorf("cut to %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	// Bytes that are not UTF-8 are cut near the bound, not emptied.
	if got := Text(strings.Repeat("\x80", 1000), Max); len(got) < Max-3 {
		t.Errorf("cut to %d bytes", len(got))
	}
}

func TestLine(t *testing.T) {
	for in, want := range map[string]string{
		"":                         "",
		"plain":                    "plain",
		"  a\r\n\tb\x1b[31m c\n\n": "a b [31m c",
		"bad \xff\xfe utf-8":       "bad \uFFFD\uFFFD utf-8",
		"kept \uFFFD":              "kept \uFFFD",
	} {
		if got := Line(in, Max); got != want {
			t.Errorf("Line(%q) = %q, want %q", in, got, want)
		}
	}
	got := Line(strings.Repeat("<p>\n", 1<<18), Max) // 1 MiB of HTML
	if len(got) > Max+len("…") || !strings.HasSuffix(got, "…") || strings.ContainsAny(got, "\r\n") || !utf8.ValidString(got) {
		t.Errorf("a 1 MiB body became %d bytes: %.80q", len(got), got)
	}
}
