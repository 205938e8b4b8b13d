package meter

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// fixtureWant holds what each recorded OpenAI-shaped stream contains. The
// numbers were counted from the files themselves (reading the chunks, with
// grep and a throw-away script independent of this package), not produced
// by the code under test.
type fixtureWant struct {
	events        int // SSE events, comments and [DONE] included
	tokenEvents   int
	contentEvents int
	usageOnly     int
	firstToken    int // index of the first token event
	lastToken     int
	firstContent  int // -1: none
	isl, osl      int
	source        UsageSource
	done          bool
	errMsg        string
	perEvent      []int // tokens per event (continuous usage), nil if unknown
}

var perplexityPerEvent = []int{1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 8}

const groqError = "Tool call validation failed: tool call validation failed: parameters for tool get_something_by_name did not match schema: errors: [missing properties: 'name', additionalProperties 'invalid_param' not allowed]"

var fixtureWants = map[string]fixtureWant{
	// role chunk with content "" and refusal null; 48 content chunks; finish; [DONE]. No usage: OSL estimated.
	"openai/aigw-chat-streaming-gpt5nano.txt": {51, 50, 48, 0, 0, 49, 1, Unknown, 48, UsageEstimate, true, "", nil},
	// role chunk, finish_reason length with no content at all (all reasoning), usage chunk, [DONE].
	"openai/aigw-chat-streaming-include-usage-gpt5nano.txt": {4, 2, 0, 1, 0, 1, -1, 12, 100, UsageUpstream, true, "", nil},
	"openai/aigw-chat-streaming-web-search.txt":             {26, 25, 23, 0, 0, 24, 1, Unknown, 23, UsageEstimate, true, "", nil},
	// completions: 25 text chunks (the last with finish_reason length), usage chunk, [DONE].
	"openai/aigw-completions-streaming-include-usage-babbage.txt": {27, 25, 25, 1, 0, 24, 0, 31, 25, UsageUpstream, true, "", nil},
	"openai/aigw-completions-streaming-babbage.txt":               {26, 25, 25, 0, 0, 24, 0, Unknown, 25, UsageEstimate, true, "", nil},
	"openai/lcgo-chat-stream-include-usage-gpt35.txt":             {17, 15, 13, 1, 0, 14, 1, 14, 13, UsageUpstream, true, "", nil},
	"openai/lcgo-chat-stream-include-usage-gpt35-long.txt":        {86, 84, 82, 1, 0, 83, 1, 19, 82, UsageUpstream, true, "", nil},
	// comment, three role chunks (content ""), the content+finish chunk, the usage trailer with
	// non-empty choices (not a token event), [DONE].
	"openai-compat-other/lcgo-openrouter-chat-stream-comment.txt": {7, 4, 1, 1, 1, 4, 4, 586, 3, UsageUpstream, true, "", nil},
	// CRLF; usage on every chunk (completion_tokens 1, 3, 5, ... 35, 43); the last chunk has
	// finish_reason stop, so its usage is final; no [DONE].
	"openai-compat-other/lcgo-perplexity-chat-stream-crlf.txt": {19, 19, 19, 0, 0, 18, 0, 12, 43, UsageUpstream, false, "", perplexityPerEvent},
	"openai/oaipy-chat-stream-parallel-tool-calls.txt":         {26, 24, 22, 1, 0, 23, 1, 149, 60, UsageUpstream, true, "", nil},
	// n=3: three role chunks and three finish chunks carry no content.
	"openai/oaipy-chat-stream-n3-choices.txt":          {50, 48, 42, 1, 0, 47, 1, 79, 42, UsageUpstream, true, "", nil},
	"openai/oaipy-chat-stream-refusal-logprobs.txt":    {15, 13, 11, 1, 0, 12, 1, 79, 12, UsageUpstream, true, "", nil},
	"openai/oaipy-chat-stream-finish-length.txt":       {5, 3, 1, 1, 0, 2, 1, 79, 1, UsageUpstream, true, "", nil},
	"errors/pai-groq-stream-event-error-midstream.txt": {95, 94, 93, 0, 0, 93, 1, Unknown, 93, UsageEstimate, false, groqError, nil},
	// 17 comment events, 3 chunks (the 2nd and 3rd with finish_reason length), the error chunk
	// with usage and non-empty choices (a trailer), [DONE].
	"errors/pai-openrouter-stream-error-in-chunk.txt": {22, 3, 2, 1, 17, 19, 17, 43, 10, UsageUpstream, true, "Token limit reached", nil},
	// llama.cpp before its pull request #16109: role chunk, three content
	// chunks, its error in the error: field (no data: WHATWG would drop
	// it), [DONE]. No usage: OSL estimated.
	"errors/llamacpp-src-chat-stream-error-field.txt": {6, 4, 3, 0, 0, 3, 1, Unknown, 3, UsageEstimate, true, "Context size has been exceeded.", nil},
	// usage on the finish chunk itself; role chunk and finish chunk carry no content.
	"openai-compat-other/pai-deepseek-chat-stream-reasoning-content.txt": {212, 211, 209, 0, 0, 210, 1, 6, 212, UsageUpstream, true, "", nil},
	"vllm/oll-vllm-chat-stream-opt125m.txt":                              {22, 21, 20, 0, 0, 20, 1, Unknown, 20, UsageEstimate, true, "", nil},
	"vllm/oll-vllm-completions-stream-opt125m.txt":                       {21, 20, 20, 0, 0, 19, 0, Unknown, 20, UsageEstimate, true, "", nil},
	// data: without space; role and content in every chunk; empty finish chunk; no [DONE].
	"tgi/hfh-tgi1.4.3-chat-stream-no-done.txt":                      {21, 21, 20, 0, 0, 20, 0, Unknown, 20, UsageEstimate, false, "", nil},
	"tgi/hfh-tgi3.2.1-chat-stream.txt":                              {21, 20, 20, 0, 0, 19, 0, Unknown, 20, UsageEstimate, true, "", nil},
	"vllm/pai-crusoe-vllm0.24-chat-stream-include-usage.txt":        {17, 15, 13, 1, 0, 14, 1, 46, 14, UsageUpstream, true, "", nil},
	"llamacpp/fantasy-llamacpp-b7010-chat-stream-usage-timings.txt": {51, 49, 47, 1, 0, 48, 1, 84, 57, UsageUpstream, true, "", nil},
	"llamacpp/fantasy-llamacpp-b7010-chat-stream-tool-call.txt":     {27, 25, 23, 1, 0, 24, 1, 139, 41, UsageUpstream, true, "", nil},
	"llamacpp/fantasy-llamacpp-b7010-chat-stream-thinking.txt":      {28, 26, 24, 1, 0, 25, 1, 139, 42, UsageUpstream, true, "", nil},
	// role, 3 content chunks, separate finish chunk, usage chunk, [DONE].
	"simulators/llm-d-inference-sim-chat-stream-include-usage.txt": {7, 5, 3, 1, 0, 4, 1, 7, 3, UsageUpstream, true, "", nil},
	// SGLang with return_hidden_states: role, 7 content chunks, finish chunk, then the
	// hidden-states chunk (non-empty choices, after the choice's finish_reason: no token
	// event), usage chunk, [DONE].
	"sglang/sglang-src-chat-stream-hidden-states.txt": {12, 9, 7, 1, 0, 8, 1, 30, 8, UsageUpstream, true, "", nil},
	// 5 text chunks (the last with finish_reason length), the hidden-states chunk (no
	// token event), usage chunk, [DONE].
	"sglang/sglang-src-completions-stream-hidden-states.txt": {8, 5, 5, 1, 0, 4, 0, 7, 5, UsageUpstream, true, "", nil},
}

// openAIFixtures returns the OpenAI-shaped SSE fixtures listed in
// PROVENANCE.tsv, and fails when one has no expectations here.
func openAIFixtures(t *testing.T) map[string]bool {
	t.Helper()
	out := make(map[string]bool)
	for file, kind := range provenance(t) {
		ok, completions := openAISSEKind(kind)
		if !ok {
			continue
		}
		if _, known := fixtureWants[file]; !known {
			t.Errorf("fixture %s (kind %s) has no expected counts in fixtureWants", file, kind)
		}
		out[file] = completions
	}
	for file := range fixtureWants {
		if _, ok := out[file]; !ok {
			t.Errorf("fixtureWants names %s, which PROVENANCE.tsv does not list as OpenAI-shaped SSE", file)
		}
	}
	if len(out) < 20 {
		t.Fatalf("only %d OpenAI-shaped SSE fixtures found", len(out))
	}
	return out
}

func parserFor(completions bool) Parser {
	if completions {
		return newParser(APICompletions)
	}
	return newParser(APIChat)
}

func TestOpenAIFixtures(t *testing.T) {
	for file, completions := range openAIFixtures(t) {
		t.Run(file, func(t *testing.T) {
			w := fixtureWants[file]
			input := readFixture(t, file)
			p := parserFor(completions)
			got := runMeter(input, nil, p)

			if got.parseErrs != 0 {
				t.Errorf("%d parse errors", got.parseErrs)
			}
			if got.events != w.events {
				t.Errorf("events = %d, want %d", got.events, w.events)
			}
			var tok, content, usageOnly, errs int
			for _, info := range got.infos {
				if info.Token {
					tok++
					if info.Content {
						content++
					}
				}
				if info.UsageOnly {
					usageOnly++
					if info.Token || info.Content {
						t.Errorf("usage-only event also Token/Content: %+v", info)
					}
				}
				if info.Error {
					errs++
				}
			}
			if tok != w.tokenEvents || content != w.contentEvents || usageOnly != w.usageOnly {
				t.Errorf("token/content/usage-only events = %d/%d/%d, want %d/%d/%d",
					tok, content, usageOnly, w.tokenEvents, w.contentEvents, w.usageOnly)
			}
			if got.done != w.done {
				t.Errorf("done = %v, want %v", got.done, w.done)
			}
			if w.errMsg == "" {
				if got.errSeen || errs != 0 {
					t.Errorf("unexpected error %q", got.errMsg)
				}
			} else if !got.errSeen || got.errMsg != w.errMsg || errs != 1 {
				t.Errorf("error = %v %q (%d events), want %q in one event", got.errSeen, got.errMsg, errs, w.errMsg)
			}

			// The Meter's record, with event k stamped at t0 + (k+1) ms.
			at := func(k int) time.Duration { return time.Duration(k+1) * time.Millisecond }
			want := Record{}
			want.Reset()
			want.ISL, want.OSL, want.UsageSource = w.isl, w.osl, w.source
			want.Events = w.tokenEvents
			want.TTFT = at(w.firstToken)
			want.E2E = at(w.lastToken)
			if w.firstContent >= 0 {
				want.TTFTContent = at(w.firstContent)
			}
			if w.osl > 1 {
				want.TPOT = (want.E2E - want.TTFT) / time.Duration(w.osl-1)
			}
			// Token events are consecutive in every one of these files: each gap is 1 ms.
			for i := 1; i < w.tokenEvents; i++ {
				want.ITL = append(want.ITL, time.Millisecond)
			}
			if w.tokenEvents > 1 {
				want.MaxITL = time.Millisecond
			}
			want.TokensPerEvent = append(want.TokensPerEvent, w.perEvent...)
			if !recordsEqual(&got.rec, &want) {
				t.Errorf("record\n got %+v\nwant %+v", got.rec, want)
			}
		})
	}
}

func recordsEqual(a, b *Record) bool {
	x, y := *a, *b
	if !slices.Equal(x.ITL, y.ITL) || !slices.Equal(x.TokensPerEvent, y.TokensPerEvent) {
		return false
	}
	x.ITL, y.ITL, x.TokensPerEvent, y.TokensPerEvent = nil, nil, nil, nil
	return reflect.DeepEqual(x, y)
}

func runsEqual(a, b *meterRun) bool {
	x, y := *a, *b
	if !recordsEqual(&x.rec, &y.rec) {
		return false
	}
	x.rec, y.rec = Record{}, Record{}
	return reflect.DeepEqual(x, y)
}

// TestOpenAIFixturesSplit parses and meters every OpenAI-shaped fixture fed
// one byte at a time, at random cuts, and cut in two at every event boundary
// (±2 bytes) and at every 61st byte, and requires exactly the result of the
// whole input. (TestSSEFramerFixtures checks the events for a cut at every
// byte; parsing and metering only see those events.)
func TestOpenAIFixturesSplit(t *testing.T) {
	for file, completions := range openAIFixtures(t) {
		t.Run(file, func(t *testing.T) {
			input := readFixture(t, file)
			p := parserFor(completions)
			whole := runMeter(input, nil, p)
			check := func(cuts []int) {
				t.Helper()
				got := runMeter(input, cuts, p)
				if !runsEqual(&got, &whole) {
					t.Fatalf("cuts %v: result differs from the whole input:\n got %+v\nwant %+v", cuts, got.rec, whole.rec)
				}
			}
			check(everyByte(len(input)))
			rng := rand.New(rand.NewPCG(3, uint64(len(input))))
			for k := 0; k < 5; k++ {
				check(randomCuts(rng, len(input)))
			}
			var positions []int
			off := 0
			for _, ev := range frameSSE(input, nil, 0).events {
				off += len(ev.Raw)
				for d := -2; d <= 2; d++ {
					positions = append(positions, off+d)
				}
			}
			for i := 0; i < len(input); i += 61 {
				positions = append(positions, i)
			}
			for _, c := range positions {
				if c >= 0 && c <= len(input) {
					check([]int{c})
				}
			}
		})
	}
}

// TestOpenAIFixtureUsageTrailerStripped checks the property the proxy relies
// on: dropping the Raw of usage-only events from a stream that asked for
// usage leaves a valid stream with the same token events.
func TestOpenAIFixtureUsageTrailerStripped(t *testing.T) {
	input := readFixture(t, "openai-compat-other/lcgo-openrouter-chat-stream-comment.txt")
	var (
		f     SSEFramer
		p     = newParser(APIChat)
		ev    Event
		info  EventInfo
		kept  []byte
		token int
	)
	f.Feed(input)
	for {
		ok, err := f.Next(&ev)
		if err != nil || !ok {
			break
		}
		if err := p.Parse(&ev, &info); err != nil {
			t.Fatal(err)
		}
		if !info.UsageOnly {
			kept = append(kept, ev.Raw...)
		}
	}
	kept = append(kept, f.Rest()...)
	if strings.Contains(string(kept), `"usage"`) {
		t.Fatalf("usage chunk still in the stream:\n%s", kept)
	}
	again := runMeter(kept, nil, newParser(APIChat))
	for _, info := range again.infos {
		if info.Token {
			token++
		}
	}
	if token != 4 || !again.done || again.rec.UsageSource != UsageEstimate {
		t.Fatalf("after stripping: %d token events, done %v, source %v", token, again.done, again.rec.UsageSource)
	}
}
