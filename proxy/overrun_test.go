package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/sim"
)

// overrunBackend is a limiter configuration for the overrun tests.
func overrunBackend(t *testing.T, backend string) ratelimit.BackendConfig {
	bc := ratelimit.BackendConfig{Backend: backend}
	if backend == "redis" {
		// A timeout far above any decision's: a decision that timed out
		// would admit unlimited (fail_open), which is not what is tested.
		bc.Redis = ratelimit.RedisConfig{URL: redisURL(t), KeyPrefix: fmt.Sprintf("gp-test-%d", time.Now().UnixNano()),
			Timeout: cfgtypes.Duration(5 * time.Second)}
	}
	return bc
}

// noMaxTokens is a streamed chat request that sets no max_tokens.
const noMaxTokens = `{"model":"sim-llama","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// Fifty concurrent streams that set no max_tokens, against tpm 1000: each is
// charged the default allowance (lowered to fit the tpm), so together they
// are served no more than the tpm. (Charged their prompt only, 50 such
// streams of 132 tokens were served 6.6 times the tpm.)
func TestTokenLimitWithoutMaxTokens(t *testing.T) {
	_, simURL := startSim(t, sim.Config{DefaultMaxTokens: 132, ITL: 2 * time.Millisecond})
	for _, backend := range []string{"local", "redis"} {
		t.Run(backend, func(t *testing.T) {
			tc, key := tenantWithKey(t, "acme", ratelimit.Limits{TPM: 1000})
			store, gate := newKeysAndGate(t, overrunBackend(t, backend), tc)
			g := startGateway(t, Config{Upstream: simURL, Keys: store, Limits: gate})
			auth := map[string]string{"Authorization": "Bearer " + key}
			const n = 50
			var wg sync.WaitGroup
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", noMaxTokens, auth); err != nil || status != 200 && status != 429 {
						t.Errorf("status %d err %v", status, err)
					}
				}()
			}
			wg.Wait()
			served, ok := 0, 0
			for range n {
				rec := g.record(t)
				if rec.Outcome == meter.OutcomeOK {
					ok++
					served += rec.OSL
				}
			}
			t.Logf("%d streams served, %d output tokens (tpm 1000)", ok, served)
			if ok == 0 || served > 1000 {
				t.Fatalf("%d streams served %d output tokens against tpm 1000", ok, served)
			}
		})
	}
}

// openStream sends a streamed request and returns its response, to be read
// as it comes.
func openStream(t *testing.T, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	resp, err := testClient.Do(newPost(t, url, body, hdr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return resp
}

// readContent reads SSE lines until n events with content have arrived (n < 0:
// to the end). It returns how many arrived, the last line, and the read
// error at the end (nil at a clean end).
func readContent(r *bufio.Reader, n int) (got int, last string, err error) {
	for n < 0 || got < n {
		line, err := r.ReadString('\n')
		if s := strings.TrimSpace(line); s != "" {
			last = s
		}
		if strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
			got++
		}
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return got, last, err
		}
	}
	return got, last, nil
}

// A stream that outgrows its charge (here the default allowance of 16) is
// charged as it goes: while it runs, its tokens are already gone from the
// bucket, and another request of the tenant waits. Under on_overrun: charge
// it runs to its end.
func TestOverrunChargedAsItGoes(t *testing.T) {
	_, simURL := startSim(t, sim.Config{DefaultMaxTokens: 1500})
	for _, backend := range []string{"local", "redis"} {
		t.Run(backend, func(t *testing.T) {
			tc, key := tenantWithKey(t, "acme", ratelimit.Limits{TPM: 1000})
			store, gate := newKeysAndGate(t, overrunBackend(t, backend), tc)
			g := startGateway(t, Config{Upstream: simURL, Keys: store, Limits: gate, DefaultMaxTokens: 16})
			auth := map[string]string{"Authorization": "Bearer " + key, "X-Sim-ITL": "1ms"}
			resp := openStream(t, g.URL()+"/v1/chat/completions", noMaxTokens, auth)
			br := bufio.NewReader(resp.Body)
			if got, _, err := readContent(br, 1100); got != 1100 {
				t.Fatalf("%d content events, then %v", got, err)
			}
			// 1100 tokens streamed: the bucket (1000) is spent.
			status, hdr, body, err := post(t, g.URL()+"/v1/chat/completions", simChat, auth)
			if err != nil || status != 429 || hdr.Get("x-ratelimit-remaining-tokens") != "0" {
				t.Fatalf("mid-stream request: %d %v %s %v", status, hdr, body, err)
			}
			if rec := g.record(t); rec.Outcome != meter.OutcomeRateLimited {
				t.Fatalf("record %+v", rec)
			}
			got, last, err := readContent(br, -1)
			if err != nil || got != 400 || last != "data: [DONE]" {
				t.Fatalf("rest of the stream: %d events, last %q, err %v", got, last, err)
			}
			if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.OSL != 1500 {
				t.Fatalf("record %+v", rec)
			}
		})
	}
}

// Under on_overrun: cut a stream that outgrows its charge is cut once the
// tenant's tokens are spent: the client gets an error event and a response
// without its final chunk; the record says rate_limited.
func TestOverrunCut(t *testing.T) {
	_, simURL := startSim(t, sim.Config{DefaultMaxTokens: 3000})
	for _, c := range []struct {
		backend string
		margin  int // tokens streamed while a chunk's decision is in flight
	}{{"local", 0}, {"redis", 100}} {
		t.Run(c.backend, func(t *testing.T) {
			tc, key := tenantWithKey(t, "acme", ratelimit.Limits{TPM: 1000, OnOverrun: ratelimit.OverrunCut})
			store, gate := newKeysAndGate(t, overrunBackend(t, c.backend), tc)
			g := startGateway(t, Config{Upstream: simURL, Keys: store, Limits: gate, DefaultMaxTokens: 16})
			auth := map[string]string{"Authorization": "Bearer " + key, "X-Sim-ITL": "1ms"}
			resp := openStream(t, g.URL()+"/v1/chat/completions", noMaxTokens, auth)
			got, last, err := readContent(bufio.NewReader(resp.Body), -1)
			if err == nil || !strings.Contains(last, `"code":"rate_limit_exceeded"`) {
				t.Fatalf("%d events, last %q, err %v: want the error event and an abnormal end", got, last, err)
			}
			rec := g.record(t)
			t.Logf("cut after %d tokens (record: %d)", got, rec.OSL)
			if rec.Outcome != meter.OutcomeRateLimited || rec.ErrorMessage != overrunMessage || rec.Status != 200 {
				t.Fatalf("record %+v", rec)
			}
			if got < 900 || got > 1000+c.margin || rec.OSL < got || rec.OSL > 1000+c.margin {
				t.Fatalf("cut after %d tokens (record %d), want about 1000 (tpm)", got, rec.OSL)
			}
			if rec.OSL != got+1 {
				// The event whose tokens the limit refused is metered (the
				// engine made them) but never reaches the client: a stream
				// that may be cut is written after it is metered.
				t.Fatalf("the client got %d tokens, the record counts %d: want the refused event's one more", got, rec.OSL)
			}
		})
	}
}

// A Messages API stream is cut with an error event in Anthropic's shape,
// which the Anthropic SDKs raise (they skip an event they do not know,
// such as OpenAI's error chunk).
func TestOverrunCutMessages(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		if writeChunk(c, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n") != nil {
			return
		}
		for range 3000 {
			if writeChunk(c, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n") != nil {
				return
			}
		}
		endChunks(c)
	})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{TPM: 1000, OnOverrun: ratelimit.OverrunCut})
	store, gate := newKeysAndGate(t, overrunBackend(t, "local"), tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16})
	resp := openStream(t, g.URL()+"/v1/messages", `{"model":"claude","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`,
		map[string]string{"X-Api-Key": key})
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatal("the cut stream ended normally")
	}
	events := strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n")
	last := events[len(events)-1]
	if last != strings.TrimSuffix(string(overrunEventMessages), "\n\n") {
		t.Fatalf("the last of %d events is %q, want Anthropic's error event", len(events), last)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeRateLimited || rec.Route != "messages" || rec.OSL < 900 || rec.OSL > 1000 {
		t.Fatalf("record: outcome %v route %q osl %d", rec.Outcome, rec.Route, rec.OSL)
	}
}

// An Ollama stream is cut with one line in Ollama's error shape, after the
// last whole line it had; an OpenAI-shaped stream on the same path
// (llama.cpp's /api/chat) with OpenAI's error chunk.
func TestOverrunCutOllama(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		if strings.Contains(string(c.Req.Body()), `"sse"`) {
			writeSSEHead(c)
			for range 3000 {
				if writeChunk(c, `data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}],"object":"chat.completion.chunk"}`+"\n\n") != nil {
					return
				}
			}
			endChunks(c)
			return
		}
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n")
		for range 3000 {
			if writeChunk(c, `{"model":"m","message":{"role":"assistant","content":"x"},"done":false}`+"\n") != nil {
				return
			}
		}
		endChunks(c)
	})
	for _, c := range []struct{ model, sep, last string }{
		{"ndjson", "\n", strings.TrimSuffix(string(overrunEventOllama), "\n")},
		{"sse", "\n\n", strings.TrimSuffix(string(overrunEvent), "\n\n")},
	} {
		tc, key := tenantWithKey(t, "acme", ratelimit.Limits{TPM: 1000, OnOverrun: ratelimit.OverrunCut})
		store, gate := newKeysAndGate(t, overrunBackend(t, "local"), tc)
		g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16})
		auth := map[string]string{"Authorization": "Bearer " + key}
		resp := openStream(t, g.URL()+"/api/chat", `{"model":"`+c.model+`","messages":[{"role":"user","content":"hi"}]}`, auth)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("%s: the cut stream ended normally", c.model)
		}
		lines := strings.Split(strings.TrimSuffix(string(body), c.sep), c.sep)
		if last := lines[len(lines)-1]; last != c.last {
			t.Fatalf("%s: the last of %d lines is %q, want %q", c.model, len(lines), last, c.last)
		}
		for _, l := range lines[:len(lines)-1] {
			if !strings.Contains(l, `"content":"x"`) {
				t.Fatalf("%s: line %q", c.model, l)
			}
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeRateLimited || rec.Route != "ollama_chat" || rec.OSL < 900 || rec.OSL > 1000 {
			t.Fatalf("%s: record: outcome %v route %q osl %d", c.model, rec.Outcome, rec.Route, rec.OSL)
		}
	}
}
