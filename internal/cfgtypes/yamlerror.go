package cfgtypes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// CleanYAMLError turns yaml's "field x not found in type config.Config"
// (a configuration, a tenants file) into a message a user can act on.
func CleanYAMLError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		// The decoder makes an error of every value of the wrong type:
		// a list of 600,000 {} where names were due (1.2 MB) made one of
		// 26 MB, which a reload logs as one line. The first MaxErrors
		// are kept, and the others counted.
		msgs := make([]string, 0, min(len(te.Errors), MaxErrors)+1)
		for _, e := range te.Errors[:min(len(te.Errors), MaxErrors)] {
			if i := strings.Index(e, "field "); i >= 0 && strings.Contains(e, "not found in type") {
				name := e[i+len("field "):]
				if j := strings.Index(name, " not found"); j >= 0 {
					name = name[:j]
				}
				msgs = append(msgs, strings.TrimSpace(e[:i])+" unknown key "+strconvQuote(name))
				continue
			}
			msgs = append(msgs, e)
		}
		if more := len(te.Errors) - MaxErrors; more > 0 {
			msgs = append(msgs, fmt.Sprintf("and %d more errors, not shown (the first %d are)", more, MaxErrors))
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	return err
}

func strconvQuote(s string) string { return `"` + s + `"` }

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// syntaxLine puts in a YAML syntax error of src the line the mistake is on.
// yaml.v3 reports a parser error at the line before the block that holds it
// (the block's start, counted from 0), not at the mistake: a key indented
// under the wrong parent on line 14 of a tenants file was "line 7: did not
// find expected key", a line with nothing wrong, in a tenant other than the
// one edited. The mistake's line is the shortest run of whole lines from the
// top that fails with the same error (one that stops before the mistake
// parses, or fails otherwise); it is found by bisection, a few parses even
// of a large file. Any other error is returned unchanged.
func syntaxLine(src []byte, err error) error {
	var te *yaml.TypeError
	if err == nil || errors.As(err, &te) {
		return err
	}
	want := err.Error()
	m := yamlLine.FindStringSubmatch(want)
	if m == nil {
		return err
	}
	reported, _ := strconv.Atoi(m[1])
	fails := func(b []byte) bool {
		var n yaml.Node
		e := yaml.NewDecoder(bytes.NewReader(b)).Decode(&n)
		return e != nil && !errors.Is(e, io.EOF) && e.Error() == want
	}
	var ends []int // ends[i]: the offset just past line i+1
	for i, c := range src {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(src) {
		ends = append(ends, len(src))
	}
	lo, hi := max(reported, 1), len(ends)
	if lo > hi || !fails(src) {
		return err
	}
	for lo < hi {
		if mid := (lo + hi) / 2; fails(src[:ends[mid-1]]) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo == reported {
		return err
	}
	return errors.New(yamlLine.ReplaceAllLiteralString(want, "yaml: line "+strconv.Itoa(lo)+": "))
}
