package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
)

// The Responses API and Anthropic's Messages API are metered like chat:
// recorded streams of each pass through byte for byte, the request body is
// forwarded as the client wrote it (both APIs send their usage unasked, so
// nothing is injected or removed), and the record has the route, the
// engine's counts and one stamp per token event. The gateway key is
// removed, from x-api-key too (an Anthropic client's), and the tenant's
// engine credential goes as a bearer token, the one header vLLM and SGLang
// check on every route.
// postEventByEvent is post, reading the answer line by line and, at each
// event's end (a blank line), telling next that the client has it.
func postEventByEvent(url, body string, hdr map[string]string, next chan<- struct{}) (int, string, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var got strings.Builder
	for {
		line, err := br.ReadString('\n')
		got.WriteString(line)
		if line == "\n" {
			select {
			case next <- struct{}{}:
			default:
			}
		}
		if err == io.EOF {
			return resp.StatusCode, got.String(), nil
		}
		if err != nil {
			return resp.StatusCode, got.String(), err
		}
	}
}

func TestResponsesAndMessagesMetered(t *testing.T) {
	streams := map[string]string{
		"/v1/responses": fixtureText(t, "openai/pai-responses-stream-output-text.txt"),
		"/v1/messages":  fixtureText(t, "anthropic/lcgo-messages-stream-claude3opus-ping.txt"),
	}
	// vLLM's answer to a background request: generated later, read back
	// with GET /v1/responses/{id}.
	const queued = `{"id":"resp_1","object":"response","status":"queued","error":null,"output":[],"usage":null}`
	bodies := map[string]string{
		"/v1/responses": `{"object":"response","status":"completed","error":null,"output":[{"type":"message","content":[{"type":"output_text","text":"Paris."}]}],"usage":{"input_tokens":36,"output_tokens":3}}`,
		"/v1/messages":  `{"type":"message","content":[{"type":"text","text":"Paris."}],"stop_reason":"end_turn","usage":{"input_tokens":30,"cache_read_input_tokens":6,"output_tokens":3}}`,
	}
	// A streamed answer's next event is sent once the client has the one
	// before (next), so that each is read, and stamped, on its own: paced
	// by a millisecond's sleep, events a loaded CI machine read together
	// had gaps of 0.
	next := make(chan struct{}, 1)
	up := startRawUpstream(t, func(c *scriptConn) {
		path := string(c.Req.URI().Path())
		if !strings.Contains(string(c.Req.Body()), `"stream":true`) {
			b := bodies[path]
			if strings.Contains(string(c.Req.Body()), `"background":true`) {
				b = queued
			}
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
			c.BW.Flush()
			return
		}
		writeSSEHead(c)
		select {
		case <-next: // a signal left by the stream before
		default:
		}
		for i, ev := range strings.SplitAfter(streams[path], "\n\n") {
			if ev == "" {
				continue
			}
			if i > 0 {
				select {
				case <-next:
				case <-time.After(10 * time.Second):
				}
			}
			writeChunk(c, ev)
		}
		endChunks(c)
	})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
	tc.Upstream = ratelimit.UpstreamConfig{APIKey: "engine-secret"}
	store, _ := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store})

	for _, c := range []struct {
		path, body string
		hdr        map[string]string
		api        meter.API
		stream     bool
		isl, osl   int
		events     int
		credential string // the engine's credential header line
	}{
		{"/v1/responses", `{"model":"gpt-4o","stream":true,"input":"hi","max_output_tokens":50}`,
			map[string]string{"Authorization": "Bearer " + key}, meter.APIResponses, true, 278, 9, 7, "Authorization: Bearer engine-secret"},
		{"/v1/messages", `{"model":"claude-3-opus","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"count"}]}`,
			map[string]string{"X-Api-Key": key, "Anthropic-Version": "2023-06-01"}, meter.APIMessages, true, 15, 13, 3, "Authorization: Bearer engine-secret"},
		{"/v1/responses", `{"model":"gpt-4o","input":"hi"}`,
			map[string]string{"Authorization": "Bearer " + key}, meter.APIResponses, false, 36, 3, meter.Unknown, "Authorization: Bearer engine-secret"},
		{"/v1/messages", `{"model":"claude-3-opus","max_tokens":64,"messages":[{"role":"user","content":"capital?"}]}`,
			map[string]string{"X-Api-Key": key}, meter.APIMessages, false, 36, 3, meter.Unknown, "Authorization: Bearer engine-secret"},
	} {
		name := fmt.Sprintf("%s stream=%v", c.path, c.stream)
		status, got, err := postEventByEvent(g.URL()+c.path, c.body, c.hdr, next)
		if err != nil || status != 200 {
			t.Fatalf("%s: status %d err %v", name, status, err)
		}
		want := bodies[c.path]
		if c.stream {
			want = streams[c.path]
		}
		if got != want {
			t.Errorf("%s: the client got\n%q\nthe engine sent\n%q", name, got, want)
		}
		if string(up.lastBody()) != c.body {
			t.Errorf("%s: the engine got the body %s, the client sent %s", name, up.lastBody(), c.body)
		}
		h := up.lastHeaders()
		if strings.Contains(h, key) || !strings.Contains(h, c.credential+"\r\n") || strings.Count(h, "engine-secret") != 1 {
			t.Errorf("%s: the engine's headers:\n%s\nwant the credential only as %q, and no gateway key", name, h, c.credential)
		}
		if c.stream && !strings.Contains(h, "Accept-Encoding: identity") {
			t.Errorf("%s: the engine was not asked for an uncompressed stream:\n%s", name, h)
		}
		rec := g.record(t)
		if rec.Route != c.api.String() || !rec.Inference() || rec.Tenant != "acme" || rec.Stream != c.stream || rec.Outcome != meter.OutcomeOK {
			t.Errorf("%s: route %q (inference %v) tenant %q stream %v outcome %v", name, rec.Route, rec.Inference(), rec.Tenant, rec.Stream, rec.Outcome)
		}
		if rec.ISL != c.isl || rec.OSL != c.osl || rec.UsageSource != meter.UsageUpstream || rec.Events != c.events {
			t.Errorf("%s: isl %d osl %d (%v) events %d, want %d %d (usage) %d", name, rec.ISL, rec.OSL, rec.UsageSource, rec.Events, c.isl, c.osl, c.events)
		}
		if c.stream && (len(rec.ITL) != c.events-1 || rec.TTFT <= 0 || rec.E2E <= rec.TTFT || rec.TPOT <= 0) {
			t.Errorf("%s: gaps %v ttft %v e2e %v tpot %v", name, rec.ITL, rec.TTFT, rec.E2E, rec.TPOT)
		}
	}
	// A background request's acknowledgement is passed on and recorded,
	// but it is not an inference request: nothing was generated yet.
	status, _, got, err := post(t, g.URL()+"/v1/responses", `{"model":"gpt-4o","input":"hi","background":true}`, map[string]string{"Authorization": "Bearer " + key})
	if err != nil || status != 200 || got != queued {
		t.Fatalf("background request: status %d err %v body %q", status, err, got)
	}
	if rec := g.record(t); !rec.Deferred || rec.Inference() || rec.Outcome != meter.OutcomeOK || rec.Route != "responses" ||
		!strings.Contains(string(rec.AppendJSON(nil)), `"deferred":true`) {
		t.Errorf("background request: deferred %v inference %v outcome %v route %q", rec.Deferred, rec.Inference(), rec.Outcome, rec.Route)
	}
	// A Responses API path that generates nothing (a stored response, read
	// back) is not metered.
	up2 := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
		c.BW.Flush()
	})
	g2 := startGateway(t, Config{Upstream: up2.URL()})
	for _, path := range []string{"/v1/responses/resp_1", "/v1/messages/count_tokens"} {
		if status, _, _, err := post(t, g2.URL()+path, `{"model":"m"}`, nil); err != nil || status != 200 {
			t.Fatalf("%s: status %d err %v", path, status, err)
		}
		if rec := g2.record(t); rec.Route != "other" || rec.Inference() {
			t.Errorf("%s: route %q", path, rec.Route)
		}
	}
}

// What a non-streamed answer's body says is believed only where it fits:
// an acknowledgement ("queued", "in_progress") defers the record only for
// a request that asked for background generation and only on a success,
// and an error in a successful answer's body is the engine's error (found
// by a hostile-engine probe: a 500 or a 429 whose body said "queued" was
// deferred, so never judged, and a 200 holding a failed response or an
// Anthropic error object was ok and good).
func TestNonStreamedBodyIsBelievedWhereItFits(t *testing.T) {
	type answer struct {
		status int
		body   string
	}
	var next answer
	var mu sync.Mutex
	up := startRawUpstream(t, func(c *scriptConn) {
		mu.Lock()
		a := next
		mu.Unlock()
		fmt.Fprintf(c.BW, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", a.status, len(a.body), a.body)
		c.BW.Flush()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	const queued = `{"id":"r","status":"queued","output":[],"usage":null}`
	for _, c := range []struct {
		name, path, req string
		answer
		deferred bool
		outcome  meter.Outcome
		msg      string
	}{
		{"background, acknowledged", "/v1/responses", `{"model":"m","input":"x","background":true}`, answer{200, queued}, true, meter.OutcomeOK, ""},
		{"background, in progress", "/v1/responses", `{"model":"m","input":"x","background":true}`, answer{202, strings.Replace(queued, "queued", "in_progress", 1)}, true, meter.OutcomeOK, ""},
		{"not asked for", "/v1/responses", `{"model":"m","input":"x"}`, answer{200, queued}, false, meter.OutcomeOK, ""},
		{"a 500 that says queued", "/v1/responses", `{"model":"m","input":"x","background":true}`,
			answer{500, `{"id":"r","status":"queued","error":{"message":"engine exploded"}}`}, false, meter.OutcomeUpstreamError, "upstream status 500"},
		{"a 429 that says in_progress", "/v1/responses", `{"model":"m","input":"x","background":true}`,
			answer{429, `{"status":"in_progress"}`}, false, meter.OutcomeClientError, "upstream status 429"},
		{"a failed response", "/v1/responses", `{"model":"m","input":"x"}`,
			answer{200, `{"status":"failed","error":{"code":"server_error","message":"boom"},"output":[]}`}, false, meter.OutcomeUpstreamError, "error in the response body: boom"},
		{"a failed response without its error", "/v1/responses", `{"model":"m","input":"x"}`,
			answer{200, `{"status":"failed","error":null,"output":[]}`}, false, meter.OutcomeUpstreamError, "error in the response body (no message)"},
		{"an Anthropic error object", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[]}`,
			answer{200, `{"type":"error","error":{"type":"api_error","message":"boom"}}`}, false, meter.OutcomeUpstreamError, "error in the response body: boom"},
		{"a chat error object", "/v1/chat/completions", `{"model":"m","messages":[]}`,
			answer{200, `{"error":{"message":"boom","type":"x"}}`}, false, meter.OutcomeUpstreamError, "error in the response body: boom"},
	} {
		mu.Lock()
		next = c.answer
		mu.Unlock()
		status, _, got, err := post(t, g.URL()+c.path, c.req, nil)
		if err != nil || status != c.status || got != c.body {
			t.Fatalf("%s: status %d err %v body %q: not passed on as sent", c.name, status, err, got)
		}
		rec := g.record(t)
		if rec.Deferred != c.deferred || rec.Outcome != c.outcome || rec.ErrorMessage != c.msg {
			t.Errorf("%s: deferred %v outcome %s error %q; want %v %s %q", c.name, rec.Deferred, rec.Outcome, rec.ErrorMessage, c.deferred, c.outcome, c.msg)
		}
	}
}

// A Responses or Messages API stream that ends, however cleanly, before
// the event that ends a response (which the APIs' clients wait for) was cut
// short: upstream_error, where it was ok and judged good (found by a Node
// SDK probe).
func TestStreamWithoutItsFinalEventIsCut(t *testing.T) {
	for _, c := range []struct {
		path, events string
		ok           bool
	}{
		{"/v1/responses", "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n", false},
		{"/v1/responses", "data: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\ndata: {\"type\":\"response.incomplete\",\"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n", true},
		{"/v1/messages", "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n", false},
		{"/v1/messages", "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", true},
	} {
		up := startRawUpstream(t, func(sc *scriptConn) {
			writeSSEHead(sc)
			writeChunk(sc, c.events)
			endChunks(sc)
		})
		g := startGateway(t, Config{Upstream: up.URL()})
		if _, _, body, err := post(t, g.URL()+c.path, `{"model":"m","stream":true,"max_tokens":5,"input":"x"}`, nil); err != nil || body != c.events {
			t.Fatalf("%s: err %v body %q", c.path, err, body)
		}
		rec := g.record(t)
		if c.ok && (rec.Outcome != meter.OutcomeOK || rec.ErrorMessage != "") {
			t.Errorf("%s with its final event: %s %q", c.path, rec.Outcome, rec.ErrorMessage)
		}
		if !c.ok && (rec.Outcome != meter.OutcomeUpstreamError || rec.ErrorMessage != errNoFinalEvent || rec.Events != 1) {
			t.Errorf("%s without its final event: %s %q, %d events", c.path, rec.Outcome, rec.ErrorMessage, rec.Events)
		}
	}
}

// The count of token events before the first with content is the stream's
// own, not changed by what an engine sends after its end marker (found by
// review: a content chunk after [DONE] moved it to 2).
func TestLeadEventsIgnoreWhatComesAfterTheEnd(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		for _, ev := range []string{vllmEvents[0], vllmEvents[1], vllmEvents[3], done, vllmEvents[2]} {
			writeChunk(c, ev)
		}
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	if _, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil); err != nil {
		t.Fatal(err)
	}
	if rec := g.record(t); rec.LeadEvents != 1 || rec.Events != 3 {
		t.Fatalf("lead events %d, events %d; want 1 and 3", rec.LeadEvents, rec.Events)
	}
}

// fixtureText returns the recorded stream or body name (a path under
// testdata's streams, slash-separated).
func fixtureText(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixturesDir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
