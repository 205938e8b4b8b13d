package config

import (
	"bufio"
	"bytes"
	"strings"

	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/keyshape"
	"github.com/goodput/goodput/internal/regfile"
	"go.yaml.in/yaml/v3"
)

// A configuration's errors quote what they refuse, and a gateway key
// pasted into the wrong field is then quoted. Whole (gp- and its 43
// characters), keyshape.RedactWhole finds it by its shape; its part after
// gp- (the whole of its secret) only its digest finds, and the file that
// holds it holds the digest too, in a sha256 field.

// RedactKeys returns s with every key it quotes redacted: one with gp- by
// its shape, and the part after gp- of one whose digest the configuration
// file (as it is now, or as it was read when it cannot be read again) or
// its tenants file (as it is now) holds: the files are read only when an
// error or a warning needs them. For the
// errors and warnings that quote the configuration; a nil c redacts by
// shape only.
func (c *Config) RedactKeys(s string) string {
	s = keyshape.RedactWhole(s)
	if c == nil {
		return s
	}
	digests := c.digests
	if digests == nil && c.Path != "" {
		if data, err := regfile.ReadFile(c.Path); err == nil {
			digests = digestsIn(data)
		}
	}
	if c.TenantsFile != "" {
		if data, err := regfile.ReadFile(c.TenantsFile); err == nil {
			digests = append(digests[:len(digests):len(digests)], digestsIn(data)...)
		}
	}
	return identity.RedactKeysOf(s, digests)
}

// RedactErr is err with its message through RedactKeys (errors.Is and As
// still see err).
func (c *Config) RedactErr(err error) error {
	if err == nil {
		return nil
	}
	msg := c.RedactKeys(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// digestsIn returns what in data could be a key's SHA-256 digest: every
// run of exactly 64 hex digits in its bytes (a file that does not parse),
// and every YAML scalar that is one once decoded (a UTF-16 file, a quoted
// string with escapes).
func digestsIn(data []byte) []string {
	var out []string
	isHex := func(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
	for i := 0; i < len(data); {
		if !isHex(data[i]) {
			i++
			continue
		}
		j := i
		for j < len(data) && isHex(data[j]) {
			j++
		}
		if j-i == 64 && (i == 0 || !keyshape.IsBase64URL(data[i-1])) && (j == len(data) || !keyshape.IsBase64URL(data[j])) {
			out = append(out, string(data[i:j]))
		}
		i = j
	}
	var root yaml.Node
	if yaml.Unmarshal(data, &root) == nil {
		var walk func(n *yaml.Node)
		walk = func(n *yaml.Node) {
			if n.Kind == yaml.ScalarNode {
				if v := strings.TrimSpace(n.Value); len(v) == 64 && strings.IndexFunc(v, func(r rune) bool { return r >= 128 || !isHex(byte(r)) }) < 0 {
					out = append(out, v)
				}
			}
			for _, k := range n.Content {
				walk(k)
			}
		}
		walk(&root)
	}
	return out
}

// tenantsFileIn returns the tenants_file data names, also when data does
// not parse (its error may quote a key whose digest only the tenants file
// holds): from a line "tenants_file: NAME" at the top level.
func tenantsFileIn(data []byte) string {
	var probe struct {
		TenantsFile string `yaml:"tenants_file"`
	}
	if yaml.Unmarshal(data, &probe) == nil {
		return probe.TenantsFile
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "tenants_file:")
		if !ok {
			continue
		}
		if i := strings.Index(v, " #"); i >= 0 {
			v = v[:i]
		}
		return strings.Trim(strings.TrimSpace(v), `"'`)
	}
	return ""
}
