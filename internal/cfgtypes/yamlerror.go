package cfgtypes

import (
	"errors"
	"strings"

	"go.yaml.in/yaml/v3"
)

// CleanYAMLError turns yaml's "field x not found in type config.Config"
// (a configuration, a tenants file) into a message a user can act on.
func CleanYAMLError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, 0, len(te.Errors))
		for _, e := range te.Errors {
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
		return errors.New(strings.Join(msgs, "; "))
	}
	return err
}

func strconvQuote(s string) string { return `"` + s + `"` }
