package proxy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
)

// vLLM's POST /v1/chat/completions/batch generates each conversation of
// its messages (a list of conversations) as a chat request, and answers
// them all in one chat.completion (a choice a conversation, usage summed).
// It is metered as its own route, chat_batch: the record counts the
// answer's usage, the model's limits hold it (its default model's when it
// names none), and it is charged at admission every conversation's output
// limit, from a large body's text too. The gateway adds no stream_options
// (vLLM answers a batch in one JSON body). Passed through as another
// route, it was charged its body's bytes/4 and never its output, and no
// per-model limit applied: a client sent many conversations in one request
// past its token limits.
func TestChatBatchMetered(t *testing.T) {
	for _, backend := range []string{"local", "redis"} {
		t.Run(backend, func(t *testing.T) { testChatBatchMetered(t, backend) })
	}
}

func testChatBatchMetered(t *testing.T, backend string) {
	answer, err := os.ReadFile(filepath.Join(fixturesDir, "vllm", "vllm-src-chat-batch-answer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string // the bodies the engine was sent
	up := startRawUpstream(t, func(c *scriptConn) {
		mu.Lock()
		seen = append(seen, string(c.Req.RequestURI())+" "+string(c.Req.Body()))
		mu.Unlock()
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	// acme: 1000 tokens a minute; big: a million, for bodies whose bytes/4
	// alone would pass 1000; unnamed: 1000 for its model m alone.
	acme, acmeKey := tenantWithKey(t, "acme", ratelimit.Limits{TPM: 1000})
	big, bigKey := tenantWithKey(t, "big", ratelimit.Limits{TPM: 1_000_000})
	unnamed, unnamedKey := tenantWithKey(t, "unnamed", ratelimit.Limits{})
	unnamed.Models = map[string]ratelimit.Limits{"m": {TPM: 1000}}
	bc := ratelimit.BackendConfig{Backend: backend}
	if backend == "redis" {
		bc.Redis = ratelimit.RedisConfig{URL: redisURL(t), KeyPrefix: fmt.Sprintf("gp-test-batch-%d", time.Now().UnixNano())}
	}
	store, gate := newKeysAndGate(t, bc, acme, big, unnamed)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16})
	auth := func(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }
	const path = "/v1/chat/completions/batch"

	// Three conversations, asked as a stream (vLLM answers one JSON body
	// all the same): the record counts the answer's summed usage, and the
	// engine gets the body as sent, without stream_options.
	three := `{"model":"m","stream":true,"echo":true,"max_tokens":50,"messages":[` +
		`[{"role":"user","content":"What color is the sky?"}],` +
		`[{"role":"user","content":"What is 2+2?"}],` +
		`[{"role":"system","content":"Answer in one word."},{"role":"user","content":"Capital of France?"}]]}`
	status, _, body, err := post(t, g.URL()+path, three, auth(acmeKey))
	if err != nil || status != 200 || body != string(answer) {
		t.Fatalf("three conversations: status %d, %v, answer %q", status, err, body)
	}
	rec := g.record(t)
	if rec.Route != "chat_batch" || rec.Outcome != meter.OutcomeOK || rec.Stream || rec.Model != "m" ||
		rec.ISL != 36 || rec.OSL != 16 || rec.UsageSource != meter.UsageUpstream {
		t.Fatalf("record: route %q outcome %s stream %v model %q isl %d osl %d usage %v; want chat_batch ok, no stream, m, 36 and 16 from the engine's usage",
			rec.Route, rec.Outcome, rec.Stream, rec.Model, rec.ISL, rec.OSL, rec.UsageSource)
	}
	mu.Lock()
	if len(seen) != 1 || seen[0] != path+" "+three {
		t.Fatalf("the engine was sent %q, want the body as sent", seen)
	}
	mu.Unlock()

	// Charged at admission for each conversation: acme has some 900 of
	// 1000 tokens left (the first was charged its 52 used); two of 300
	// pass, and are charged 600 until their usage comes back; four of 300
	// (1200) are over the tpm: too large.
	two := `{"model":"m","max_tokens":300,"messages":[[{"role":"user","content":"a"}],[{"role":"user","content":"b"}]]}`
	four := `{"model":"m","max_tokens":300,"messages":[[],[],[],[]]}`
	for _, c := range []struct {
		name, key, body string
		status          int
		tooLarge        bool
		msg             string
	}{
		{"two of 300", acmeKey, two, 200, false, ""},
		{"four of 300", acmeKey, four, 429, true, ""},
		{"four with max_completion_tokens", acmeKey, strings.Replace(four, "max_tokens", "max_completion_tokens", 1), 429, true, ""},
		{"four times n 2 of 150", acmeKey, strings.Replace(four, `"max_tokens":300`, `"max_tokens":150,"n":2`, 1), 429, true, ""},
		// Naming no model, it counts against the tenant's default, m.
		{"no model", unnamedKey, `{"max_tokens":400,"messages":[[],[],[]]}`, 429, true, "model limit"},
		// A body over shallowFrom, parsed shallow: its conversations are
		// counted from its text. Some 19,000 tokens of bytes/4, and 4 ×
		// 250,000: over a million.
		{"large body", bigKey, `{"model":"m","max_tokens":250000,"messages":[` +
			`[{"role":"user","content":"` + strings.Repeat("x", shallowFrom) + `"}],[],[],[]]}`, 429, true, ""},
		// A million empty conversations (3 MB: 750,000 tokens of
		// bytes/4), each charged a token at least: over a million.
		{"a million empty conversations", bigKey, `{"model":"m","messages":[` + strings.Repeat("[],", 999_999) + `[]]}`, 429, true, ""},
	} {
		status, _, body, err := post(t, g.URL()+path, c.body, auth(c.key))
		if err != nil {
			t.Fatal(err)
		}
		rec := g.record(t)
		switch {
		case status != c.status:
			t.Errorf("%s: status %d %.200s, want %d", c.name, status, body, c.status)
		case status == 429 && (rec.Outcome != meter.OutcomeRateLimited || rec.Route != "chat_batch" ||
			c.tooLarge != strings.Contains(body, "Request too large for tenant") || !strings.Contains(body, c.msg)):
			t.Errorf("%s: record %s %q, answer %.200s", c.name, rec.Outcome, rec.Route, body)
		}
	}
}
