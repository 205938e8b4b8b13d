package export

import (
	"fmt"
	"testing"
)

func TestLabelSetConfigured(t *testing.T) {
	s := NewLabelSet([]string{"acme", "beta"}, 0)
	for in, want := range map[string]string{"acme": "acme", "beta": "beta", "gamma": Other, "": Other} {
		if got := s.Value(in); got != want {
			t.Errorf("Value(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLabelSetFirstComeBounded(t *testing.T) {
	s := NewLabelSet(nil, 3)
	for i := 0; i < 3; i++ {
		if v := fmt.Sprint("m", i); s.Value(v) != v {
			t.Fatalf("%s not admitted", v)
		}
	}
	if got := s.Value("m3"); got != Other {
		t.Fatalf("fourth value admitted as %q", got)
	}
	if got := s.Value("m1"); got != "m1" {
		t.Fatalf("admitted value lost: %q", got)
	}
}
