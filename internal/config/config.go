// Package config reads goodput's YAML configuration file. Unknown keys are
// errors, and every error names the field it is about.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/goodput/goodput/internal/cfgtypes"
	"go.yaml.in/yaml/v3"
)

// Config is the whole configuration file. The zero value of a field means
// the default its comment names.
type Config struct {
	// Upstream is the engine's base URL. Empty: `serve` runs the built-in
	// simulator in-process and proxies to it.
	Upstream string `yaml:"upstream"`
	// Listen is the proxy's address. Empty means ":8080".
	Listen string `yaml:"listen"`
	// AdminListen serves /metrics, /healthz and /readyz. Empty means
	// "127.0.0.1:9090"; "off" disables it.
	AdminListen string `yaml:"admin_listen"`
	// RequestLog is the JSON Lines request log; "-" is standard output;
	// empty means no request log.
	RequestLog string `yaml:"request_log"`
	// TenantHeader carries the tenant name. Empty means "X-Tenant".
	TenantHeader string `yaml:"tenant_header"`
	// MaxBodyBytes limits request bodies. Zero means 16 MiB.
	MaxBodyBytes int `yaml:"max_body_bytes"`
	// Timeouts bound the upstream exchange.
	Timeouts Timeouts `yaml:"timeouts"`
	// Labels bounds metric label values.
	Labels Labels `yaml:"labels"`
	// Sim configures the built-in simulator used when Upstream is empty.
	Sim Sim `yaml:"sim"`
}

// Timeouts of the upstream exchange; zero means the proxy's default
// (connect 5s, first_byte 60s, idle 30s, total unlimited).
type Timeouts struct {
	Connect   cfgtypes.Duration `yaml:"connect"`
	FirstByte cfgtypes.Duration `yaml:"first_byte"`
	Idle      cfgtypes.Duration `yaml:"idle"`
	Total     cfgtypes.Duration `yaml:"total"`
}

// Labels lists the tenant and model label values metrics may carry.
// Empty lists admit the first MaxValues values seen; the rest are "other".
type Labels struct {
	Tenants   []string `yaml:"tenants"`
	Models    []string `yaml:"models"`
	MaxValues int      `yaml:"max_values"` // zero means 32
}

// Sim configures the embedded simulator; zero values take the simulator's
// defaults.
type Sim struct {
	Model string            `yaml:"model"`
	TTFT  cfgtypes.Duration `yaml:"ttft"`
	ITL   cfgtypes.Duration `yaml:"itl"`
}

// Load reads and validates a configuration file.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	c, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse reads a configuration from r. Unknown keys are errors.
func Parse(r io.Reader) (*Config, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	c := &Config{}
	if len(bytes.TrimSpace(b)) == 0 {
		return c, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		return nil, cleanYAMLError(err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// cleanYAMLError turns yaml's "field x not found in type config.Config"
// into a message a user can act on.
func cleanYAMLError(err error) error {
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

// Validate checks values a YAML type check cannot.
func (c *Config) Validate() error {
	if c.MaxBodyBytes < 0 {
		return fmt.Errorf("max_body_bytes: must not be negative, got %d", c.MaxBodyBytes)
	}
	if c.Labels.MaxValues < 0 {
		return fmt.Errorf("labels.max_values: must not be negative, got %d", c.Labels.MaxValues)
	}
	if c.TenantHeader != "" && strings.ContainsAny(c.TenantHeader, " :\t\r\n") {
		return fmt.Errorf("tenant_header: %q is not a header name", c.TenantHeader)
	}
	return nil
}
