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

// The otel section and the log settings are read, and checked.
func TestParseOTelAndLog(t *testing.T) {
	c, err := Parse(strings.NewReader("log_format: json\nlog_level: warn\notel:\n  traces: true\n  metrics: true\n  endpoint: http://c:4318\n  service_name: gw\n  metric_interval: 15s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if o := c.OTel; !o.Traces || !o.Metrics || o.Endpoint != "http://c:4318" || o.ServiceName != "gw" || o.MetricInterval.D().Seconds() != 15 || c.LogFormat != "json" || c.LogLevel != "warn" {
		t.Fatalf("parsed %+v, log %q %q", o, c.LogFormat, c.LogLevel)
	}
	for doc, want := range map[string]string{
		"otel: {endpoint: c:4318}":     "otel.endpoint",
		"otel: {metric_interval: -1s}": "otel.metric_interval",
		"log_format: logfmt":           "log_format",
		"log_level: verbose":           "log_level",
	} {
		if _, err := Parse(strings.NewReader(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want one naming %s", doc, err, want)
		}
	}
}

// An otel.metric_interval under a second is refused, with its line (found
// by an operator-side probe: 1ms made an idle gateway export about 880
// times a second, on 196 ms of CPU a second).
func TestOTelMetricIntervalMinimum(t *testing.T) {
	for _, v := range []string{"1ns", "1ms", "999ms"} {
		doc := "otel:\n  metrics: true\n  metric_interval: " + v + "\n"
		if _, err := Parse(strings.NewReader(doc)); err == nil || !strings.Contains(err.Error(), "line 3: otel.metric_interval: "+v+" is less than 1s") {
			t.Errorf("%s: err = %v", v, err)
		}
	}
	if _, err := Parse(strings.NewReader("otel:\n  metric_interval: 1s\n")); err != nil {
		t.Error(err)
	}
}
