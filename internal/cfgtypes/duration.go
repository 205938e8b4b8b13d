// Package cfgtypes holds small value types shared by the configuration
// sections of several packages (proxy, ratelimit, slo).
package cfgtypes

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written in YAML as a Go duration string
// ("500ms", "1m30s"). A bare integer is rejected: it would be ambiguous.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML parses a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &ValueError{Line: n.Line, Column: n.Column, Msg: `want a duration such as "500ms"`}
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return &ValueError{Line: n.Line, Column: n.Column, Msg: fmt.Sprintf(`%q is not a duration (want e.g. "500ms", "2s")`, n.Value)}
	}
	if v < 0 {
		return &ValueError{Line: n.Line, Column: n.Column, Msg: fmt.Sprintf("duration %q is negative", n.Value)}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// String returns the duration as a Go duration string.
func (d Duration) String() string { return time.Duration(d).String() }

// Set implements flag.Value so the same type serves flags and files.
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (want e.g. \"500ms\", \"2s\")", s)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}
