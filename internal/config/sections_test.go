package config

import (
	"strings"
	"testing"
)

// A misspelt key inside the tenants and ratelimit sections is an error that
// names the key and its line, as at the top level.
func TestParseRejectsUnknownKeysInSections(t *testing.T) {
	for name, doc := range map[string]string{
		"limits":   "tenants: [{name: a, keys: [], limits: {rpm: 1, max_concurency: 3}}]",
		"tenant":   "tenants: [{name: a, keys: [], limit: {rpm: 1}}]",
		"key":      "tenants: [{name: a, keys: [{id: k, sha: x}]}]",
		"upstream": "tenants: [{name: a, keys: [], upstream: {key: x}}]",
		"backend":  "ratelimit: {backend: local, on_error: fail_open}",
		"redis":    "ratelimit: {redis: {url: x, timeout_ms: 5}}",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(doc))
			if err == nil || !strings.Contains(err.Error(), "unknown field") || !strings.Contains(err.Error(), "line 1") {
				t.Fatalf("err = %v, want an unknown field error with its line", err)
			}
		})
	}
}
