package cfgtypes

import (
	"errors"
	"fmt"
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
