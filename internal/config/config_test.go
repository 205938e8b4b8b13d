package config

import (
	"strings"
	"testing"
	"time"
)

const full = `
upstream: http://127.0.0.1:8000
listen: ":8080"
admin_listen: "127.0.0.1:9090"
request_log: requests.jsonl
tenant_header: X-Tenant
max_body_bytes: 16777216
max_event_bytes: 4194304
timeouts: {connect: 5s, first_byte: 60s, first_token: 300s, idle: 30s, total: 0s}
labels: {tenants: [acme], models: [llama-70b], max_values: 32}
tenants:
  - name: acme
    slo: interactive
    slo_by_model: {llama-8b: batch}
    slo_by_shape: {rag: interactive}
    keys:
      - id: acme-prod
        sha256: "0000000000000000000000000000000000000000000000000000000000000000"
    limits: {rpm: 600, tpm: 200000, max_concurrency: 32, burst: 20}
    models: {llama-70b: {tpm: 50000}}
ratelimit:
  backend: redis
  redis: {url: "redis://127.0.0.1:6379/0", timeout: 50ms}
  on_backend_error: fail_open
slos:
  interactive: {ttft: 500ms, tpot: 50ms, e2e: 60s, objective: 0.99}
  reader:      {deadline: {ttft: 1s, pace: 60ms}, objective: 0.95}
  batch:       {e2e: 300s, objective: 0.9}
default_slo: batch
shapes: {rag_min_isl: 4096}
`

func TestParseFull(t *testing.T) {
	c, err := Parse(strings.NewReader(full))
	if err != nil {
		t.Fatal(err)
	}
	if c.Upstream != "http://127.0.0.1:8000" || c.Timeouts.Idle.D() != 30*time.Second || c.Timeouts.FirstToken.D() != 300*time.Second || !c.KeysEnabled() {
		t.Fatalf("%+v", c)
	}
	if c.MaxEventBytes != 4<<20 {
		t.Fatalf("max_event_bytes %d, want 4194304", c.MaxEventBytes)
	}
	if len(c.Tenants) != 1 || c.Tenants[0].Limits.RPM != 600 || c.Tenants[0].SLOByModel["llama-8b"] != "batch" {
		t.Fatalf("tenants %+v", c.Tenants)
	}
	if c.RateLimit.Backend != "redis" || c.RateLimit.Redis.Timeout.D() != 50*time.Millisecond {
		t.Fatalf("ratelimit %+v", c.RateLimit)
	}
	if len(c.SLO.SLOs) != 3 || c.SLO.SLOs["reader"].Deadline == nil || c.SLO.Shapes.RAGMinISL != 4096 || c.DefaultSLO != "batch" {
		t.Fatalf("slo %+v", c.SLO)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"listen_addr: x\n", `unknown key "listen_addr"`},
		{"timeouts: {idel: 1s}\n", `unknown key "idel"`},
		{"timeouts: {idle: 3}\n", `timeouts.idle: "3" is not a duration`},
		{"timeouts:\n  connect: 1s\n  idle: fast\n", `line 3: timeouts.idle: "fast" is not a duration`},
		{"ratelimit: {redis: {timeout: soon}}\n", "ratelimit.redis.timeout"},
		{"slos: {x: {deadline: {ttft: 1s, pace: [1]}, objective: 0.9}}\n", "slos.x.deadline.pace: want a duration"},
		{"default_slo: gold\n", `default_slo: "gold" is not one of the classes`},
		{"slos: {a: {ttft: 1s, objective: 1.5}}\n", "slos.a.objective"},
		{"tenants: [{name: acme, slo: gold, keys: []}]\nslos: {a: {ttft: 1s, objective: 0.9}}\n", `tenants[0].slo: "gold"`},
		{"tenants: [{name: acme, keys: [{id: k, sha256: nothex}]}]\n", "tenants[0].keys[0].sha256"},
		{"ratelimit: {backend: memcached}\n", "ratelimit.backend"},
		{"tenants: [{name: a, keys: []}]\ntenants_file: t.yaml\n", "tenants_file"},
		{"max_body_bytes: -1\n", "max_body_bytes"},
		{"max_event_bytes: 1024\n", "line 1: max_event_bytes: must be from 4096 (4 KiB) to 67108864 (64 MiB), or 0 for the default 1 MiB; got 1024"},
		{"max_event_bytes: 134217728\n", "max_event_bytes: must be from 4096"},
		{"max_event_bytes: -1\n", "max_event_bytes: must be from 4096"},
		{"gc_percent: -1\n", "gc_percent: must not be negative"},
		{"labels:\n  models: [llama, " + strings.Repeat("m", 257) + "]\n", `line 2: labels.models[1]: "mmmm`},
		{"labels: {tenants: [\"a\\tb\"]}\n", "labels.tenants[0]: \"a\\tb\" cannot be a label value: want 1 to 256 bytes"},
		{"shutdown_grace: -1s\n", `shutdown_grace: duration "-1s" is negative`},
	} {
		_, err := Parse(strings.NewReader(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to contain %q", c.yaml, err, c.want)
		}
	}
}

func TestEmptyConfig(t *testing.T) {
	c, err := Parse(strings.NewReader(""))
	if err != nil || c.KeysEnabled() {
		t.Fatalf("%+v %v", c, err)
	}
}

func TestCheckUpstreamSaysWhatToType(t *testing.T) {
	for in, want := range map[string]string{
		"engine:8000":       `"engine:8000" has no scheme: add http:// (http://engine:8000)`,
		"http//engine:8000": `"http//engine:8000" is missing the colon after its scheme: http://engine:8000`,
		"https://engine":    "TLS to the upstream is not supported",
		"   ":               "empty",
	} {
		if err := CheckUpstream(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want %q", in, err, want)
		}
	}
	if err := CheckUpstream("http://engine:8000"); err != nil {
		t.Errorf("a valid upstream: %v", err)
	}
	// A password in the URL is not quoted: the message goes to the start's
	// log, or to config check's output.
	for in, want := range map[string]string{
		"user:s3cretpassw0rd@engine:8000":         `add http:// (http://user:xxxxx@engine:8000)`,
		"https://user:s3cretpassw0rd@engine":      `"https://user:xxxxx@engine": TLS`,
		"http://user:s3cretpassw0rd@engine:80/v1": `"http://user:xxxxx@engine:80/v1": a path prefix is not supported`,
	} {
		if err := CheckUpstream(in); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "passw0rd") {
			t.Errorf("%q: %v; want %q, no password", in, err, want)
		}
	}
	// A password with '@' and '/' in it: the host url.Parse finds ("ss")
	// is a piece of it, too short for urlredact to know it, and was
	// offered as the engine's base URL.
	if err := CheckUpstream("http://user:p@ss/w0rdSecret@engine:8000"); err == nil || !strings.Contains(err.Error(), "a path prefix is not supported") || strings.Contains(err.Error(), "ss)") || strings.Contains(err.Error(), "w0rd") {
		t.Errorf("a password with '@' and '/': %v", err)
	}
}
