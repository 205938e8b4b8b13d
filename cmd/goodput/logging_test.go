package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goodput/goodput/proxy"
)

// The gateway's own messages are slog records: JSON objects (time, level,
// msg) or key=value text, at the level each message tells, filtered by the
// least level.
func TestLogFormatAndLevel(t *testing.T) {
	var buf bytes.Buffer
	logger, err := newLogger(&buf, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	logger.Printf("goodput gateway listening on %s", "127.0.0.1:8080")
	logger.Printf("WARNING: upstream %s does not answer: %v", "http://e:8000", "connection refused")
	logger.Printf("proxy: panic while handling request %s: %v\n%s", "r1", "boom", "goroutine 1 [running]:")
	logger.Printf("DEBUG: timeouts: connect %v", time.Second)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3 (the debug one dropped, the panic on one line):\n%s", len(lines), buf.String())
	}
	want := []struct{ level, msg string }{
		{"INFO", "goodput gateway listening on 127.0.0.1:8080"},
		{"WARN", "upstream http://e:8000 does not answer: connection refused"},
		{"ERROR", "proxy: panic while handling request r1: boom\ngoroutine 1 [running]:"},
	}
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %d is not JSON: %v: %s", i, err, l)
		}
		if m["level"] != want[i].level || m["msg"] != want[i].msg {
			t.Errorf("line %d: level %v msg %q, want %s %q", i, m["level"], m["msg"], want[i].level, want[i].msg)
		}
		if ts, _ := m["time"].(string); ts == "" {
			t.Errorf("line %d has no time: %s", i, l)
		} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
			t.Errorf("line %d: time %q: %v", i, ts, err)
		}
	}

	buf.Reset()
	if logger, err = newLogger(&buf, "text", "warn"); err != nil {
		t.Fatal(err)
	}
	logger.Printf("SIGHUP: request log reopened")
	logger.Printf("reload failed, keeping the previous tenants: %v", "tenants[0]: no name")
	if got := strings.TrimSpace(buf.String()); !strings.HasPrefix(got, "time=") || strings.Contains(got, "\n") ||
		!strings.HasSuffix(got, ` level=WARN msg="reload failed, keeping the previous tenants: tenants[0]: no name"`) {
		t.Errorf("text log at warn:\n%s", got)
	}

	buf.Reset()
	if logger, err = newLogger(&buf, "", "debug"); err != nil {
		t.Fatal(err)
	}
	logger.Printf("DEBUG: timeouts: connect %v", time.Second)
	if got := buf.String(); !strings.Contains(got, `level=DEBUG msg="timeouts: connect 1s"`) {
		t.Errorf("text log at debug: %s", got)
	}

	for _, c := range []struct{ format, level, want string }{
		{"yaml", "", "log_format"},
		{"", "loud", "log_level"},
	} {
		if _, err := newLogger(&buf, c.format, c.level); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("newLogger(%q, %q): %v, want an error naming %s", c.format, c.level, err, c.want)
		}
	}
}

// The level of each message the gateway logs.
func TestMessageLevel(t *testing.T) {
	for _, c := range []struct {
		msg   string
		level slog.Level
	}{
		{"goodput gateway listening on :8080, upstream http://e, admin 127.0.0.1:9090", slog.LevelInfo},
		{"WARNING: the admin listener :9090 has no authentication", slog.LevelWarn},
		{"ERROR: goodput serve: listen: address in use", slog.LevelError},
		{"proxy: panic in a record sink (Record) for request r: boom", slog.LevelError},
		{"request log: writing failed: disk full; retrying at every flush", slog.LevelWarn},
		{"request log: writing again after 2s; 3 records dropped meanwhile", slog.LevelInfo},
		{"request log: closing with 3 records not written: disk full", slog.LevelWarn},
		{"ratelimit: redis [r:6379] failing (refused); allowing requests until it answers", slog.LevelWarn},
		{"ratelimit: redis [r:6379] answers again after 2s; 5 calls failed meanwhile", slog.LevelInfo},
		{"ratelimit: redis [r:6379] failed and answered again 9 more times in the last 10s (18 calls failed in them): outages that start within 10s of the last one's end are counted here, not logged one by one, unless they last 1s", slog.LevelWarn},
		{"ratelimit: redis [r:6379] failing for 1.2s (write: connection reset by peer); fail_open: admitting requests unlimited until it answers", slog.LevelWarn},
		{"ratelimit: redis [r:6379] failed the start check, answering with an error (NOAUTH Authentication required.); decisions follow on_backend_error while it answers so", slog.LevelWarn},
		{"max_connections (96) reached: new connections wait to be accepted until one closes", slog.LevelWarn},
		{"accepting connections again after 1s", slog.LevelInfo},
		{"shutdown: cutting 2 requests still in flight after 25s", slog.LevelWarn},
		{"SIGHUP: could not reopen the request log, still writing to the file it had: denied", slog.LevelWarn},
		{"reloaded: 2 tenants, 3 keys", slog.LevelInfo},
		{"upstream http://e answers again", slog.LevelInfo},
		// An error quoted in a warning does not make it a recovery (found
		// by an operations probe: all three were logged as information).
		{"ratelimit: redis [r:6402] failing (READONLY You can't write against a read only replica.); refusing requests (503) until it answers", slog.LevelWarn},
		{"request log: 4194020 bytes of records wait to be written; records are dropped until it takes writes again (counted in goodput_request_log_errors_total)", slog.LevelWarn},
		{`reload failed, keeping the previous tenants: t.yaml: line 3: unknown field "try again"`, slog.LevelWarn},
		{"request log: writing failed: write /var/log/writing again/r.jsonl: no space left on device; retrying at every flush", slog.LevelWarn},
		{"ratelimit: redis [r:6402] failing (dial: upstream x answers again); allowing requests", slog.LevelWarn},
	} {
		if got, _ := messageLevel(c.msg); got != c.level {
			t.Errorf("%q: level %v, want %v", c.msg, got, c.level)
		}
	}
}

// serve --log-format json (here from the file, log_format) writes every
// line of its own log, from the first to the last, as a JSON object.
func TestServeLogsJSON(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "goodput.yaml")
	writeFile(t, cfgPath, "listen: 127.0.0.1:0\nadmin_listen: \"off\"\nlog_format: json\nlog_level: debug\n")
	g := startChild(t, 1024, cfgPath)
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-g.exited:
		if err != nil {
			t.Fatalf("gateway exit: %v\n%s", err, g.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway still running 30s after SIGTERM\n%s", g.stderr.String())
	}
	levels := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(g.stderr.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %s\nlog:\n%s", l, g.stderr.String())
		}
		levels[fmt.Sprint(m["level"])]++
		if m["msg"] == nil || m["time"] == nil {
			t.Errorf("line without msg or time: %s", l)
		}
	}
	if levels["INFO"] < 3 || levels["DEBUG"] != 1 {
		t.Errorf("levels %v, want several INFO lines and the DEBUG one\n%s", levels, g.stderr.String())
	}
}

// The flags and keys are checked before anything starts.
func TestServeLogSettingErrors(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "goodput.yaml")
	writeFile(t, cfgPath, "log_level: loud\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-format", "yaml"}, `log_format: "yaml" is neither text nor json`},
		{[]string{"--log-level", "trace"}, `log_level: "trace" is not one of debug, info, warn, error`},
		{[]string{"--config", cfgPath}, `log_level: "loud"`},
	} {
		var stderr bytes.Buffer
		if code := run(append([]string{"serve"}, c.args...), &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// The debug line of timeouts gives the values the gateway runs with, its
// defaults filled in, not the configuration's zeros.
func TestLogTimeoutsGivesTheEffectiveValues(t *testing.T) {
	p, err := proxy.New(proxy.Config{Upstream: "http://127.0.0.1:1", IdleTimeout: 7 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	logTimeouts(p.Settings(), log.New(&buf, "", 0))
	got := buf.String()
	for _, want := range []string{"connect 5s", "first_byte 1m0s", "first_token 5m0s", "idle 7s", "read_header 10s", "read_body 30s", "max_body_bytes 16777216", "max_event_bytes 1048576"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if strings.Contains(got, " 0s") {
		t.Errorf("a zero in %q", got)
	}
}

// A gateway key never reaches the gateway's log, whatever message quotes
// it (a reload's error quotes the field a key was pasted into).
func TestLoggerRedactsKeys(t *testing.T) {
	const key = "gp-SHVcZDGMSi89pQ3d7x0kAbCdEfGhIjKlMnOpQrStUvW"
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		logger, err := newLogger(&buf, format, "info")
		if err != nil {
			t.Fatal(err)
		}
		logger.Printf("reload failed, keeping the previous tenants: tenants[1].slo: %q is not one of the classes in slos", key)
		if out := buf.String(); strings.Contains(out, key[3:19]) || !strings.Contains(out, "gp-[redacted]") || !strings.Contains(out, "reload failed") {
			t.Errorf("%s: %s", format, out)
		}
		// A host or a file named gp-something is not a key.
		buf.Reset()
		logger.Printf("WARNING: upstream http://gp-vllm-production-east:8000 fails: open /etc/goodput/gp-tenants-production.yaml")
		if out := buf.String(); !strings.Contains(out, "gp-vllm-production-east:8000") || !strings.Contains(out, "gp-tenants-production.yaml") {
			t.Errorf("%s: %s", format, out)
		}
	}
}
