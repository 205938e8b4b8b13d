package cfgtypes

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The decoder's errors, one for every value of the wrong type, are cut to
// MaxErrors and a count: a list of 600,000 {} where names were due (1.2
// MB) made an error of 26 MB, which a reload logs as one line.
func TestCleanYAMLErrorBounded(t *testing.T) {
	var v struct {
		Names []string `yaml:"names"`
	}
	doc := "names: [" + strings.Repeat("{}, ", 5000) + "]\n"
	err := CleanYAMLError(yaml.Unmarshal([]byte(doc), &v))
	if err == nil || strings.Count(err.Error(), "cannot unmarshal !!map into string") != MaxErrors ||
		!strings.HasSuffix(err.Error(), "; and 4900 more errors, not shown (the first 100 are)") {
		t.Fatalf("error of %d bytes: %.300v", len(fmt.Sprint(err)), err)
	}
	// A few are all shown, unknown keys named as such.
	var w struct {
		A int `yaml:"a"`
	}
	dec := yaml.NewDecoder(strings.NewReader("a: x\nb: 1\n"))
	dec.KnownFields(true)
	if err := CleanYAMLError(dec.Decode(&w)); err == nil || err.Error() != "line 1: cannot unmarshal !!str `x` into int; line 2: unknown key \"b\"" {
		t.Fatalf("error %v", err)
	}
}

// Errors keeps the first MaxErrors errors and counts the others.
func TestErrorsBounded(t *testing.T) {
	var e Errors
	if e.Err() != nil {
		t.Fatal("no error, yet Err is not nil")
	}
	for i := range 250 {
		if i%2 == 0 {
			e.Addf(fmt.Sprintf("f%d", i), "bad %d", i)
		} else {
			e.Add(errors.Join(fmt.Errorf("g%d", i)))
		}
	}
	msg := e.Err().Error()
	if n := strings.Count(msg, "\n") + 1; n != MaxErrors+1 || !strings.HasPrefix(msg, "f0: bad 0\ng1\n") || !strings.HasSuffix(msg, "\nand 150 more errors, not shown (the first 100 are)") {
		t.Fatalf("%d lines: %.200q … %q", n, msg, msg[len(msg)-80:])
	}
	// A list that takes in another adds the other's count to its own.
	var outer Errors
	outer.Add(errors.New("first"))
	outer.Add(e.Err())
	if msg := outer.Err().Error(); !strings.HasPrefix(msg, "first\nf0: bad 0\n") || !strings.HasSuffix(msg, "\nand 151 more errors, not shown (the first 100 are)") {
		t.Fatalf("nested: %q", msg[len(msg)-80:])
	}
}
