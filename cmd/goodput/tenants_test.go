package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/config"
	"github.com/goodput/goodput/slo"
)

// newKey runs `goodput keys new` and returns the key and its config lines.
func newKey(t *testing.T, tenant, id string) (key, lines string) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run([]string{"keys", "new", "--tenant", tenant, "--id", id}, &out, &errb); code != 0 {
		t.Fatalf("keys new: %d %s", code, errb.String())
	}
	first, rest, _ := strings.Cut(out.String(), "\n")
	key = strings.TrimPrefix(first, "key: ")
	for _, l := range strings.Split(rest, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "- id:") || strings.HasPrefix(strings.TrimSpace(l), "sha256:") {
			lines += l + "\n"
		}
	}
	if !strings.HasPrefix(key, "gp-") || !strings.Contains(lines, "sha256:") {
		t.Fatalf("keys new printed %q", out.String())
	}
	return key, lines
}

const slosYAML = `
slos:
  interactive: {ttft: 200ms, tpot: 50ms, objective: 0.9}
  batch: {e2e: 300s, objective: 0.5}
`

func tenantsYAML(keyLines string) string {
	return "tenants:\n  - name: acme\n    slo: interactive\n    keys:\n" + keyLines
}

func chatReq(t *testing.T, url, key string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const smallChat = `{"model":"sim-llama","stream":true,"max_tokens":4,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`

// Keys are reloaded on SIGHUP and on file change without dropping a stream
// in flight; an invalid file keeps the old keys.
func TestServeKeyReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "goodput.yaml")
	key1, lines1 := newKey(t, "acme", "acme-one")
	key2, lines2 := newKey(t, "acme", "acme-two")
	os.WriteFile(path, []byte(slosYAML+tenantsYAML(lines1)), 0o644)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	s, logs := startServe(t, cfg)
	base := "http://" + s.Proxy
	if st, _ := chatReq(t, base, key1, nil, smallChat); st != 200 {
		t.Fatalf("key1: %d", st)
	}
	if st, body := chatReq(t, base, key2, nil, smallChat); st != 401 || !strings.Contains(body, "invalid_api_key") {
		t.Fatalf("key2 before reload: %d %s", st, body)
	}

	// A long stream with key1 is in flight across the reloads: admitted, and
	// its first event read, before the first reload.
	streamDone := make(chan string, 1)
	started := make(chan struct{})
	go func() {
		defer close(streamDone)
		req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"sim-llama","stream":true,"max_tokens":60,"ignore_eos":true,"messages":[]}`))
		req.Header.Set("Authorization", "Bearer "+key1)
		req.Header.Set("X-Sim-ITL", "20ms")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			close(started)
			t.Errorf("stream: %v", err)
			return
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		first, err := br.ReadString('\n')
		close(started)
		if err != nil {
			t.Errorf("stream: %d, first line %q: %v", resp.StatusCode, first, err)
			return
		}
		rest, _ := io.ReadAll(br)
		streamDone <- first + string(rest)
	}()
	<-started

	// An invalid file: the old keys stay.
	os.WriteFile(path, []byte(slosYAML+tenantsYAML("      - id: broken\n        sha256: \"nothex\"\n")), 0o644)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, func() bool { return strings.Contains(logs.String(), "keeping the previous tenants") })
	if st, _ := chatReq(t, base, key1, nil, smallChat); st != 200 {
		t.Fatalf("key1 after a rejected reload: %d", st)
	}

	// Key2 added, key1 removed: picked up from the file change (and SIGHUP).
	os.WriteFile(path, []byte(slosYAML+tenantsYAML(lines2)), 0o644)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, func() bool {
		st, _ := chatReq(t, base, key2, nil, smallChat)
		return st == 200
	})
	if st, _ := chatReq(t, base, key1, nil, smallChat); st != 401 {
		t.Fatalf("removed key1 still accepted: %d", st)
	}
	body := <-streamDone
	if !strings.HasSuffix(body, "data: [DONE]\n\n") || strings.Count(body, `"content":"`) != 61 {
		t.Fatalf("the stream in flight across reloads was cut: %q", body[max(0, len(body)-200):])
	}
}

// oneKeyConfig writes a configuration with the SLO classes and tenant acme
// with one key into dir, and loads it.
func oneKeyConfig(t *testing.T, dir string) (cfg *config.Config, key, path string) {
	t.Helper()
	path = filepath.Join(dir, "goodput.yaml")
	key, lines := newKey(t, "acme", "acme-one")
	if err := os.WriteFile(path, []byte(slosYAML+tenantsYAML(lines)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, key, path
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Scripted good and bad requests through the gateway in front of the
// simulator; /admin/api/slo, the counters and the log agree with the exact
// expected numbers.
func TestServeSLOAttainment(t *testing.T) {
	dir := t.TempDir()
	cfg, key, _ := oneKeyConfig(t, dir)
	logPath := filepath.Join(dir, "requests.jsonl")
	cfg.Listen, cfg.AdminListen, cfg.RequestLog = "127.0.0.1:0", "127.0.0.1:0", logPath
	s, _ := startServe(t, cfg)
	base := "http://" + s.Proxy
	type script struct {
		n   int
		hdr map[string]string
		max int
	}
	scripts := []script{
		{4, map[string]string{"X-Sim-TTFT": "10ms", "X-Sim-ITL": "5ms"}, 5},   // good
		{2, map[string]string{"X-Sim-TTFT": "300ms", "X-Sim-ITL": "5ms"}, 5},  // ttft miss
		{1, map[string]string{"X-Sim-TTFT": "10ms", "X-Sim-ITL": "80ms"}, 3},  // tpot miss
		{1, map[string]string{"X-Sim-Fault": "status=503"}, 3},                // error
		{1, map[string]string{"X-Sim-TTFT": "300ms", "X-Sim-ITL": "80ms"}, 3}, // ttft and tpot
	}
	sent := 0
	for _, sc := range scripts {
		for i := 0; i < sc.n; i++ {
			body := fmt.Sprintf(`{"model":"sim-llama","stream":true,"max_tokens":%d,"ignore_eos":true,"messages":[{"role":"user","content":"hello"}]}`, sc.max)
			chatReq(t, base, key, sc.hdr, body)
			sent++
		}
	}
	// Not counted: no valid key.
	if st, _ := chatReq(t, base, "gp-wrong", nil, smallChat); st != 401 {
		t.Fatalf("bad key: %d", st)
	}

	var snap slo.SLOSnapshot
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + s.Admin + "/admin/api/slo?tenant=acme")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		snap = slo.SLOSnapshot{}
		if json.NewDecoder(resp.Body).Decode(&snap) != nil || len(snap.Tenants) != 1 {
			return false
		}
		return snap.Tenants[0].Windows["5m"].Requests == uint64(sent)
	})
	w := snap.Tenants[0].Windows["5m"]
	want := map[string]uint64{"ttft": 3, "tpot": 2, "error": 1}
	if w.Requests != 9 || w.Good != 4 || w.Misses != 5 || float64(w.Attainment) != 4.0/9 || float64(w.Objective) != 0.9 {
		t.Fatalf("window: requests %d good %d misses %d attainment %v objective %v", w.Requests, w.Good, w.Misses, w.Attainment, w.Objective)
	}
	for r, n := range want {
		if w.MissReasons[r] != n {
			t.Fatalf("miss reasons %v, want %v", w.MissReasons, want)
		}
	}
	// burn rate: miss ratio 5/9 over the budget 0.1
	if br := float64(w.BurnRate); br < 5.0/9/0.1-1e-9 || br > 5.0/9/0.1+1e-9 {
		t.Fatalf("burn rate %v", br)
	}
	if w.OutputTokens != 4*5+2*5+1*3+0+1*3 || w.GoodOutputTokens != 4*5 {
		t.Fatalf("output tokens %d good %d", w.OutputTokens, w.GoodOutputTokens)
	}

	// The counters say the same.
	metrics := scrape(t, "http://"+s.Admin+"/metrics")
	if got := sumWhere(metrics, "goodput_slo_requests_total", `result="good"`); got != 4 {
		t.Fatalf("good counter %v", got)
	}
	if got := sumWhere(metrics, "goodput_slo_requests_total", `result="miss"`); got != 5 {
		t.Fatalf("miss counter %v", got)
	}
	for r, n := range want {
		if got := sumWhere(metrics, "goodput_slo_misses_total", `reason="`+r+`"`); got != float64(n) {
			t.Fatalf("misses{reason=%s} = %v, want %d", r, got, n)
		}
	}
	if got := sumWhere(metrics, "goodput_slo_objective", `tenant="acme"`, `slo="interactive"`); got != 0.9 {
		t.Fatalf("objective gauge %v", got)
	}

	// And the log: every judged line has slo, good and miss_reasons.
	var lines2 []map[string]any
	waitFor(t, func() bool { lines2 = readLog(t, logPath); return len(lines2) == sent+1 })
	good := 0
	for _, l := range lines2 {
		if l["outcome"] == "unauthorized" {
			if _, judged := l["slo"]; judged {
				t.Fatalf("unauthorized request judged: %v", l)
			}
			continue
		}
		if l["slo"] != "interactive" || l["key_id"] != "acme-one" {
			t.Fatalf("line %v", l)
		}
		if l["good"] == true {
			good++
			if len(l["miss_reasons"].([]any)) != 0 {
				t.Fatalf("good with reasons: %v", l)
			}
		}
	}
	if good != 4 {
		t.Fatalf("%d good lines", good)
	}
}

// scrape returns the metrics text.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// sumWhere sums the samples of a metric whose labels contain every sel.
func sumWhere(text, name string, sel ...string) float64 {
	sum := 0.0
lines:
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, name+"{") {
			continue
		}
		for _, s := range sel {
			if !strings.Contains(l, s) {
				continue lines
			}
		}
		var v float64
		fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v)
		sum += v
	}
	return sum
}

// A tenants file replaced by a FIFO (or anything that is not a regular
// file) is a rejected reload, logged, not a reload that waits for a writer:
// the reloader hung in open, so later SIGHUPs did nothing (the request log
// was no longer reopened) and the shutdown never ended.
func TestServeTenantsFileNotARegularFile(t *testing.T) {
	cfg, key, path := oneKeyConfig(t, t.TempDir())
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "off"
	r := launchServe(t, cfg)
	t.Cleanup(r.cancel)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	t.Cleanup(func() {
		// Should a reader still wait on the FIFO, a writer ends its wait.
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, func() bool { return strings.Contains(r.logs.String(), "not a regular file") })
	if st, _ := chatReq(t, "http://"+r.Proxy, key, nil, smallChat); st != 200 {
		t.Fatalf("the key after a rejected reload: %d", st)
	}
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve still running 15s after the shutdown began")
	}
}

// `goodput keys new` refuses a tenant name the configuration would refuse
// (other: the metrics' own value), instead of printing lines for it (found
// by a helper fixing the reserved names).
func TestKeysNewRefusesReservedTenant(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"keys", "new", "--tenant", "other", "--id", "x1"}, &out, &errb); code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), `"other" is reserved`) {
		t.Fatalf("keys new --tenant other: %d %q %q", code, out.String(), errb.String())
	}
	newKey(t, "none", "x1") // a name like any other
}
