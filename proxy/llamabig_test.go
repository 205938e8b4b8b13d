package proxy

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
)

// longPrompt returns a prompt of about n bytes as llama.cpp's last event
// echoes it (detokenized, as a JSON string's text: escapes included).
func longPrompt(n int) string {
	const unit = `<|start_header_id|>user<|end_header_id|>\n\nSay \"caf\u00e9\" then {x} and [1] \\ `
	return strings.Repeat(unit, n/len(unit)+1)
}

// llama.cpp's last event repeats the prompt: the native /completion's
// (server_task_result_cmpl_final::to_json_non_oaicompat: prompt, with
// generation_settings), and, on a server started verbose, the
// OpenAI-compatible chunks' __verbose (to_json_oaicompat on
// /v1/completions: every chunk, the last with the prompt;
// to_json_oaicompat_chat_stream: the first of the last chunks). A long
// prompt makes that event larger than max_event_bytes. It reaches the
// client untouched, and the record keeps what it says (the counts, the
// stream's end): the event is read lean as it passes, without the prompt.
// Reads cut it anywhere.
func TestLlamaCppPromptEchoOverTheLimit(t *testing.T) {
	native := fixtureText(t, "llamacpp/llamacpp-src-completion-stream-native.txt")
	const echoed = `"prompt":"<|begin_of_text|>The capital of France is"`
	if !strings.Contains(native, echoed) {
		t.Fatal("the fixture's last event has no prompt")
	}
	withPrompt := func(n int) string { return strings.Replace(native, echoed, `"prompt":"`+longPrompt(n)+`"`, 1) }
	verboseFinal := func(n int) string {
		return `{"index":0,"content":"","tokens":[],"id_slot":0,"stop":true,"model":"gpt-3.5-turbo","tokens_predicted":2,"tokens_evaluated":12,"generation_settings":{"seed":4294967295,"temperature":0.8,"stop":[],"n_predict":-1,"stream":true,"grammar":""},"prompt":"` +
			longPrompt(n) + `","has_new_line":false,"truncated":false,"stop_type":"eos","stopping_word":"","tokens_cached":14,"timings":{"prompt_n":12,"predicted_n":2}}`
	}
	cmpl := func(n int) string {
		chunk := func(text, finish, extra, native string) string {
			return `data: {"choices":[{"text":"` + text + `","index":0,"logprobs":null,"finish_reason":` + finish + `}],"created":1764000000,"model":"gpt-3.5-turbo","system_fingerprint":"b7300-0a1b2c3d","object":"text_completion"` +
				extra + `,"id":"chatcmpl-x","__verbose":` + native + "}\n\n"
		}
		return chunk(" Paris", "null", "", `{"index":0,"content":" Paris","tokens":[12366],"stop":false,"id_slot":0,"tokens_predicted":1,"tokens_evaluated":12}`) +
			chunk(".", "null", "", `{"index":0,"content":".","tokens":[13],"stop":false,"id_slot":0,"tokens_predicted":2,"tokens_evaluated":12}`) +
			chunk("", `"stop"`, `,"usage":{"completion_tokens":2,"prompt_tokens":12,"total_tokens":14}`, verboseFinal(n)) + "data: [DONE]\n\n"
	}
	chat := func(n int) string {
		chunk := func(delta, finish, extra string) string {
			return `data: {"choices":[{"finish_reason":` + finish + `,"index":0,"delta":` + delta + `}],"created":1764000000,"id":"chatcmpl-x","model":"gpt-3.5-turbo","system_fingerprint":"b7300-0a1b2c3d","object":"chat.completion.chunk"` + extra + "}\n\n"
		}
		return chunk(`{"role":"assistant","content":null}`, "null", "") + chunk(`{"content":" Paris"}`, "null", "") + chunk(`{"content":"."}`, "null", "") +
			chunk(`{}`, `"stop"`, `,"__verbose":`+verboseFinal(n)) +
			`data: {"choices":[],"created":1764000000,"id":"chatcmpl-x","model":"gpt-3.5-turbo","system_fingerprint":"b7300-0a1b2c3d","object":"chat.completion.chunk","usage":{"completion_tokens":2,"prompt_tokens":12,"total_tokens":14}}` + "\n\n" +
			"data: [DONE]\n\n"
	}
	for _, c := range []struct {
		name, path, body string
		stream           func(n int) string
		route            string
		events, osl      int
	}{
		{"native", "/completion", `{"prompt":"The capital of France is","stream":true,"return_progress":true}`, withPrompt, "llamacpp_completion", 6, 6},
		{"native on /completions", "/completions", `{"prompt":"The capital of France is","stream":true}`, withPrompt, "completions", 6, 6},
		{"completions, verbose", "/v1/completions", `{"prompt":"The capital of France is","stream":true}`, cmpl, "completions", 3, 2},
		{"chat, verbose", "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, chat, "chat", 4, 2},
	} {
		for _, r := range []struct{ max, prompt, read int }{
			{0, 1_200_000, 4093}, // the default limit, 1 MiB
			{4096, 20_000, 1},    // byte by byte
			{4096, 20_000, 333},  // reads that cut the event anywhere
			{4096, 20_000, 8191}, // reads larger than the limit
		} {
			stream := c.stream(r.prompt)
			up := startRawUpstream(t, func(sc *scriptConn) {
				writeSSEHead(sc)
				for b := stream; len(b) > 0; {
					n := min(len(b), r.read)
					writeChunk(sc, b[:n])
					b = b[n:]
				}
				endChunks(sc)
			})
			g := startGateway(t, Config{Upstream: up.URL(), MaxEventBytes: r.max})
			status, _, body, err := post(t, g.URL()+c.path, c.body, nil)
			if err != nil || status != 200 || body != stream {
				t.Fatalf("%s %+v: status %d err %v: the client got %d bytes of the engine's %d", c.name, r, status, err, len(body), len(stream))
			}
			rec := g.record(t)
			if rec.Route != c.route || rec.Outcome != meter.OutcomeOK || rec.ErrorMessage != "" || rec.ISL != 12 || rec.OSL != c.osl ||
				rec.UsageSource != meter.UsageUpstream || rec.Events != c.events || len(rec.ITL) != c.events-1 {
				t.Errorf("%s %+v: route %s outcome %s %q isl %d osl %d (%v) events %d gaps %d; want ok, 12 %d (usage), %d events",
					c.name, r, rec.Route, rec.Outcome, rec.ErrorMessage, rec.ISL, rec.OSL, rec.UsageSource, rec.Events, len(rec.ITL), c.osl, c.events)
			}
		}
	}
}

// A chat event over max_event_bytes that is large for what it says (its
// text), not for what llama.cpp repeats of the request, still stops the
// metering (outcome upstream_error), also when its first pieces, read lean
// under the limit, were passed on before the lean reading outgrew it: the
// client gets every byte the engine sent, in order.
func TestLeanEventTooLargeStopsMetering(t *testing.T) {
	big := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + strings.Repeat("x", 6000) + "\"}}],\"prompt\":\"" + longPrompt(3000) + "\"}\n\n"
	stream := strings.Join(vllmEvents, "") + big + done
	for _, read := range []int{1, 333, 8191} {
		up := startRawUpstream(t, func(c *scriptConn) {
			writeSSEHead(c)
			for b := stream; len(b) > 0; {
				n := min(len(b), read)
				writeChunk(c, b[:n])
				b = b[n:]
			}
			endChunks(c)
		})
		g := startGateway(t, Config{Upstream: up.URL(), MaxEventBytes: 4096})
		_, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
		if err != nil || body != stream {
			t.Fatalf("reads of %d: the client did not get the engine's bytes: err %v, %d bytes of %d", read, err, len(body), len(stream))
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeUpstreamError || !strings.Contains(rec.ErrorMessage, "maximum event size") || rec.Events != meter.Unknown {
			t.Fatalf("reads of %d: outcome %s %q events %d", read, rec.Outcome, rec.ErrorMessage, rec.Events)
		}
	}
}

// A stream cut under on_overrun: cut at an event over max_event_bytes,
// read lean as it passes (a verbose llama.cpp server's chunks; Ollama's
// last line of /api/generate, its context the conversation's token ids,
// with a count over the tokens left): the event's first pieces went out
// before its end was read (an event of 100 kB spans several reads), so
// its last piece goes out too, before the error event: the client gets
// whole events, the engine's bytes up to the cut, then the error event
// (the last piece was dropped: the error event's line ran on from the
// half-sent event's, and the client read neither).
func TestOverrunCutAfterLeanEvent(t *testing.T) {
	chunk := func(k int) string {
		return `data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"x"}}],"object":"chat.completion.chunk","usage":{"prompt_tokens":5,"completion_tokens":` +
			fmt.Sprint(100*k) + `},"__verbose":{"prompt":"` + longPrompt(100_000) + `"}}` + "\n\n"
	}
	line := func(k int) string {
		if k < 5 {
			return `{"model":"m","response":"x","done":false}` + "\n"
		}
		return `{"model":"m","response":"","done":true,"done_reason":"stop","context":[` + strings.Repeat("128000,", 20_000) + `1],"prompt_eval_count":5,"eval_count":5000}` + "\n"
	}
	for _, c := range []struct {
		path, body, sep, last string
		event                 func(k int) string
		n                     int
	}{
		{"/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},"messages":[{"role":"user","content":"hi"}]}`,
			"\n\n", string(overrunEvent), chunk, 100},
		{"/api/generate", `{"model":"m","prompt":"hi"}`, "\n", string(overrunEventOllama), line, 5},
	} {
		up := startRawUpstream(t, func(sc *scriptConn) {
			if c.sep == "\n" {
				fmt.Fprintf(sc.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n")
			} else {
				writeSSEHead(sc)
			}
			for k := 1; k <= c.n; k++ {
				if writeChunk(sc, c.event(k)) != nil {
					return
				}
			}
			endChunks(sc)
		})
		tc, key := tenantWithKey(t, "acme", ratelimit.Limits{TPM: 1000, OnOverrun: ratelimit.OverrunCut})
		store, gate := newKeysAndGate(t, overrunBackend(t, "local"), tc)
		g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16, MaxEventBytes: 4096})
		resp := openStream(t, g.URL()+c.path, c.body, map[string]string{"Authorization": "Bearer " + key})
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Errorf("%s: the cut stream ended normally", c.path)
		}
		events := strings.Split(strings.TrimSuffix(string(body), c.sep), c.sep)
		if last := events[len(events)-1]; last+c.sep != c.last {
			t.Errorf("%s: the last of %d events is %.200q...%.200q, want the error event", c.path, len(events), last, last[max(0, len(last)-200):])
			continue
		}
		for k, ev := range events[:len(events)-1] {
			if ev+c.sep != c.event(k+1) {
				t.Fatalf("%s: event %d of %d is not the engine's: %.100q", c.path, k, len(events), ev)
			}
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeRateLimited || len(events) < 2 {
			t.Fatalf("%s: record: outcome %v, %d events", c.path, rec.Outcome, len(events))
		}
	}
}
