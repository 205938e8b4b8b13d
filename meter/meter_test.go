package meter

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func at(d time.Duration) time.Time { return testT0.Add(d) }

func tokenInfo(content bool) *EventInfo {
	return &EventInfo{Token: true, Content: content, PromptTokens: Unknown, CompletionTokens: Unknown}
}

func usageInfo(prompt, completion int) *EventInfo {
	return &EventInfo{UsageOnly: true, HasUsage: true, PromptTokens: prompt, CompletionTokens: completion}
}

// observeBasic feeds a hand-made stream: role chunk, three content chunks
// (the third after a 230 ms stall), an empty finish chunk, then optionally
// the usage chunk, then [DONE].
func observeBasic(m *Meter, withUsage bool) {
	m.Start(testT0)
	m.Observe(tokenInfo(false), at(ms(100)))
	m.Observe(tokenInfo(true), at(ms(150)))
	m.Observe(tokenInfo(true), at(ms(170)))
	m.Observe(tokenInfo(true), at(ms(400)))
	fin := tokenInfo(false)
	fin.Finish = true
	m.Observe(fin, at(ms(410)))
	if withUsage {
		m.Observe(usageInfo(10, 4), at(ms(500)))
	}
	m.Observe(&EventInfo{Done: true, PromptTokens: Unknown, CompletionTokens: Unknown}, at(ms(510)))
}

func TestMeterStream(t *testing.T) {
	var m Meter
	var rec Record
	rec.Reset()
	observeBasic(&m, true)
	m.Finish(&rec)
	want := Record{}
	want.Reset()
	want.ISL, want.OSL, want.UsageSource = 10, 4, UsageUpstream
	want.TTFT, want.TTFTContent, want.E2E = ms(100), ms(150), ms(410)
	want.TPOT = ms(310) / 3
	want.ITL = []time.Duration{ms(50), ms(20), ms(230), ms(10)}
	want.MaxITL = ms(230)
	want.Events = 5
	if !recordsEqual(&rec, &want) {
		t.Fatalf("got  %+v\nwant %+v", rec, want)
	}
	if !m.Done() || m.TokenEvents() != 5 {
		t.Errorf("Done %v, TokenEvents %d", m.Done(), m.TokenEvents())
	}
	if seen, _ := m.UpstreamError(); seen {
		t.Error("unexpected error")
	}
}

func TestMeterEstimate(t *testing.T) {
	var m Meter
	var rec Record
	observeBasic(&m, false)
	m.Finish(&rec)
	// No usage: OSL = 3 content-bearing token events; ISL unknown.
	if rec.UsageSource != UsageEstimate || rec.OSL != 3 || rec.ISL != Unknown {
		t.Fatalf("source %v OSL %d ISL %d", rec.UsageSource, rec.OSL, rec.ISL)
	}
	if rec.TPOT != ms(310)/2 {
		t.Fatalf("TPOT %v", rec.TPOT)
	}

	// A usage object without completion_tokens: ISL from it, OSL estimated.
	m.Start(testT0)
	m.Observe(tokenInfo(true), at(ms(10)))
	m.Observe(usageInfo(12, Unknown), at(ms(20)))
	m.Finish(&rec)
	if rec.UsageSource != UsageEstimate || rec.OSL != 1 || rec.ISL != 12 || rec.TPOT != Unknown {
		t.Fatalf("source %v OSL %d ISL %d TPOT %v", rec.UsageSource, rec.OSL, rec.ISL, rec.TPOT)
	}
}

// vllmContinuous is a hand-made vLLM stream with stream_options
// {"include_usage":true,"continuous_usage_stats":true}, shaped after vLLM's
// serving_chat.py: usage on every chunk (completion_tokens 0 on the role
// chunk), one chunk carrying two tokens, then the final choices:[] usage
// chunk and [DONE].
const vllmContinuous = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":7,"total_tokens":7,"completion_tokens":0}}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":7,"total_tokens":8,"completion_tokens":1}}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":7,"total_tokens":10,"completion_tokens":3}}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"!"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":7,"total_tokens":11,"completion_tokens":4}}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":7,"total_tokens":11,"completion_tokens":4}}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":7,"total_tokens":11,"completion_tokens":4}}

data: [DONE]

`

func TestMeterContinuousUsage(t *testing.T) {
	// Hand-made (see vllmContinuous).
	got := runMeter([]byte(vllmContinuous), nil, newParser(APIChat))
	r := got.rec
	if r.UsageSource != UsageUpstream || r.ISL != 7 || r.OSL != 4 {
		t.Fatalf("source %v ISL %d OSL %d", r.UsageSource, r.ISL, r.OSL)
	}
	if !slices.Equal(r.TokensPerEvent, []int{0, 1, 2, 1, 0}) {
		t.Fatalf("TokensPerEvent %v", r.TokensPerEvent)
	}
	if r.Events != 5 || r.TTFT != ms(1) || r.TTFTContent != ms(2) || r.E2E != ms(5) || r.TPOT != ms(4)/3 {
		t.Fatalf("record %+v", r)
	}
	// Every split gives the same record.
	for i := 0; i <= len(vllmContinuous); i++ {
		if g := runMeter([]byte(vllmContinuous), []int{i}, newParser(APIChat)); !runsEqual(&g, &got) {
			t.Fatalf("cut at %d: %+v", i, g.rec)
		}
	}

	// Cut short after the third chunk: the last count is a running one.
	events := strings.SplitAfter(vllmContinuous, "\n\n")
	short := runMeter([]byte(strings.Join(events[:3], "")), nil, newParser(APIChat))
	r = short.rec
	if r.UsageSource != UsageContinuous || r.ISL != 7 || r.OSL != 3 || !slices.Equal(r.TokensPerEvent, []int{0, 1, 2}) {
		t.Fatalf("cut short: source %v ISL %d OSL %d per event %v", r.UsageSource, r.ISL, r.OSL, r.TokensPerEvent)
	}

	// Usage on only some token events: per-event counts are unknown.
	var m Meter
	m.Start(testT0)
	withUsage := tokenInfo(true)
	withUsage.HasUsage, withUsage.PromptTokens, withUsage.CompletionTokens = true, 3, 1
	m.Observe(withUsage, at(ms(1)))
	m.Observe(tokenInfo(true), at(ms(2)))
	var rec Record
	m.Finish(&rec)
	if len(rec.TokensPerEvent) != 0 || rec.UsageSource != UsageContinuous || rec.OSL != 1 {
		t.Fatalf("partial usage: per event %v source %v OSL %d", rec.TokensPerEvent, rec.UsageSource, rec.OSL)
	}
}

func TestMeterBody(t *testing.T) {
	var m Meter
	var rec Record
	rec.Reset()
	m.Start(testT0)
	m.ObserveBody(&EventInfo{Token: true, Content: true, HasUsage: true, PromptTokens: 9, CompletionTokens: 12}, at(ms(800)))
	m.Finish(&rec)
	want := Record{}
	want.Reset()
	want.ISL, want.OSL, want.UsageSource, want.E2E = 9, 12, UsageUpstream, ms(800)
	if !recordsEqual(&rec, &want) {
		t.Fatalf("got  %+v\nwant %+v", rec, want)
	}

	m.Start(testT0)
	m.ObserveBody(&EventInfo{Error: true, ErrorMessage: []byte("bad"), PromptTokens: Unknown, CompletionTokens: Unknown}, at(ms(5)))
	m.Finish(&rec)
	if rec.UsageSource != UsageNone || rec.ISL != Unknown || rec.OSL != Unknown || rec.E2E != ms(5) || rec.Events != Unknown {
		t.Fatalf("error body: %+v", rec)
	}
	if seen, msg := m.UpstreamError(); !seen || string(msg) != "bad" {
		t.Fatalf("UpstreamError = %v %q", seen, msg)
	}
}

func TestMeterNoTokens(t *testing.T) {
	var m Meter
	var rec Record
	m.Start(testT0)
	msg := []byte("Token limit reached")
	m.Observe(&EventInfo{Error: true, ErrorMessage: msg, PromptTokens: Unknown, CompletionTokens: Unknown}, at(ms(30)))
	copy(msg, "XXXXX") // the Meter kept its own copy
	m.Observe(&EventInfo{Error: true, ErrorMessage: []byte("second"), PromptTokens: Unknown, CompletionTokens: Unknown}, at(ms(31)))
	m.Finish(&rec)
	if rec.Events != 0 || rec.TTFT != Unknown || rec.E2E != Unknown || rec.TTFTContent != Unknown ||
		rec.MaxITL != Unknown || rec.TPOT != Unknown || rec.UsageSource != UsageNone || rec.OSL != Unknown || len(rec.ITL) != 0 {
		t.Fatalf("record %+v", rec)
	}
	if seen, got := m.UpstreamError(); !seen || string(got) != "Token limit reached" {
		t.Fatalf("UpstreamError = %v %q", seen, got)
	}

	// A Meter that was never started reports nothing.
	var idle Meter
	rec.ISL, rec.TTFT = 5, 5
	idle.Finish(&rec)
	if rec.ISL != Unknown || rec.TTFT != Unknown || rec.Events != Unknown || rec.UsageSource != UsageNone {
		t.Fatalf("idle meter: %+v", rec)
	}
}

func TestMeterSingleToken(t *testing.T) {
	var m Meter
	var rec Record
	m.Start(testT0)
	m.Observe(tokenInfo(true), at(ms(42)))
	m.Observe(usageInfo(5, 1), at(ms(50)))
	m.Finish(&rec)
	if rec.TTFT != ms(42) || rec.E2E != ms(42) || rec.TPOT != Unknown || rec.MaxITL != Unknown || len(rec.ITL) != 0 || rec.Events != 1 || rec.OSL != 1 {
		t.Fatalf("record %+v", rec)
	}
}

// TestMeterReuse: the record stays valid after the Meter is reused, and a
// reused record holds exactly the new request's gaps.
func TestMeterReuse(t *testing.T) {
	var m Meter
	var first, second Record
	observeBasic(&m, true)
	m.Finish(&first)
	keep := slices.Clone(first.ITL)

	m.Start(testT0)
	m.Observe(tokenInfo(true), at(ms(1)))
	m.Observe(tokenInfo(true), at(ms(3)))
	m.Finish(&second)
	if !slices.Equal(first.ITL, keep) {
		t.Fatalf("first record's ITL changed to %v after the Meter was reused", first.ITL)
	}
	if !slices.Equal(second.ITL, []time.Duration{ms(2)}) || second.Events != 2 || second.TTFT != ms(1) {
		t.Fatalf("second record %+v", second)
	}
	if second.ISL != Unknown || second.UsageSource != UsageEstimate || m.Done() {
		t.Fatalf("state leaked from the first request: %+v done %v", second, m.Done())
	}

	// Finish into a record that already holds a longer ITL.
	m.Finish(&first)
	if !slices.Equal(first.ITL, []time.Duration{ms(2)}) {
		t.Fatalf("reused record ITL %v", first.ITL)
	}
}

func TestMeterErrorMessageBounded(t *testing.T) {
	var m Meter
	m.Start(testT0)
	long := []byte(strings.Repeat("é", 400)) // 800 bytes
	m.Observe(&EventInfo{Error: true, ErrorMessage: long, PromptTokens: Unknown, CompletionTokens: Unknown}, at(ms(1)))
	_, msg := m.UpstreamError()
	if len(msg) != 512 || !utf8.Valid(msg) {
		t.Fatalf("kept %d bytes (valid UTF-8: %v)", len(msg), utf8.Valid(msg))
	}
}

// OutputTokens follows a stream as it goes: content events, or the engine's
// running count when its chunks carry one, whichever is larger.
func TestOutputTokensSoFar(t *testing.T) {
	var m Meter
	m.Start(testT0)
	if m.OutputTokens() != 0 {
		t.Fatalf("at start: %d", m.OutputTokens())
	}
	m.Observe(tokenInfo(false), at(ms(10))) // role chunk: no content
	m.Observe(tokenInfo(true), at(ms(20)))
	m.Observe(tokenInfo(true), at(ms(30)))
	if got := m.OutputTokens(); got != 2 {
		t.Fatalf("two content events: %d", got)
	}
	// Continuous usage: the engine's count wins (several tokens per chunk).
	m.Observe(&EventInfo{Token: true, Content: true, HasUsage: true, PromptTokens: 5, CompletionTokens: 9}, at(ms(40)))
	if got := m.OutputTokens(); got != 9 {
		t.Fatalf("running count 9: %d", got)
	}
	m.Start(testT0)
	if m.OutputTokens() != 0 {
		t.Fatalf("after Start: %d", m.OutputTokens())
	}
}
