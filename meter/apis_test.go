package meter

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// apiFixtureWant holds what each recorded Responses API and Anthropic
// Messages stream contains, counted from the files by a throw-away script
// independent of this package (events split at blank lines; a token event
// by its JSON "type": response.*.delta, content_block_delta; content when
// the delta's text, thinking or partial_json is non-empty; a signature
// delta is not a token event; usage from the
// terminal response, or message_start and message_delta).
type apiFixtureWant struct {
	api           API
	events        int
	tokenEvents   int
	contentEvents int
	firstToken    int // index of the first token event
	lastToken     int
	firstContent  int
	maxGap        int // the largest distance between token events, in events
	isl, osl      int
}

var apiFixtureWants = map[string]apiFixtureWant{
	"openai/pai-responses-stream-background-queued.txt":   {APIResponses, 17, 8, 8, 5, 12, 5, 1, 15, 9},
	"openai/pai-responses-stream-function-call.txt":       {APIResponses, 11, 5, 5, 3, 7, 3, 1, 255, 16},
	"openai/pai-responses-stream-output-text.txt":         {APIResponses, 15, 7, 7, 4, 10, 4, 1, 278, 9},
	"openai/pai-responses-stream-reasoning-summary.txt":   {APIResponses, 676, 654, 654, 4, 671, 4, 6, 13, 1680},
	"anthropic/lcgo-messages-stream-claude3opus-ping.txt": {APIMessages, 9, 3, 3, 2, 5, 2, 2, 15, 13},
	// redacted thinking arrives whole in content_block_start: no delta.
	"anthropic/pai-messages-stream-redacted-thinking.txt": {APIMessages, 27, 15, 15, 9, 23, 9, 1, 92, 189},
	// a signature delta (not a token event) and an empty text delta (a
	// token event without content). The prompt is input_tokens +
	// cache_read_input_tokens.
	"anthropic/pai-messages-stream-server-tool-code-exec.txt": {APIMessages, 35, 20, 19, 3, 31, 3, 5, 4714, 304},
	// the thinking block's signature delta is not a token event.
	"anthropic/pai-messages-stream-thinking.txt": {APIMessages, 118, 109, 108, 3, 114, 3, 4, 43, 282},
}

func TestResponsesAndMessagesFixtures(t *testing.T) {
	kinds := provenance(t)
	for file, kind := range kinds {
		if strings.HasPrefix(kind, "openai-responses") || strings.HasPrefix(kind, "anthropic-messages") {
			if _, ok := apiFixtureWants[file]; !ok {
				t.Errorf("fixture %s (kind %s) has no expected counts in apiFixtureWants", file, kind)
			}
		}
	}
	for file, w := range apiFixtureWants {
		t.Run(file, func(t *testing.T) {
			input := readFixture(t, file)
			var p Parser = newParser(APIResponses)
			if w.api == APIMessages {
				p = newParser(APIMessages)
			}
			for _, cuts := range [][]int{nil, everyByte(min(len(input), 4096))} {
				got := runMeter(input, cuts, p)
				if got.parseErrs != 0 || got.events != w.events {
					t.Fatalf("%d events, %d parse errors; want %d events", got.events, got.parseErrs, w.events)
				}
				if !got.done || got.errSeen {
					t.Errorf("done %v, error %v %q: want done and no error", got.done, got.errSeen, got.errMsg)
				}
				var tok, content int
				for _, info := range got.infos {
					if info.Token {
						tok++
						if info.Content {
							content++
						}
					}
				}
				if tok != w.tokenEvents || content != w.contentEvents {
					t.Errorf("token/content events = %d/%d, want %d/%d", tok, content, w.tokenEvents, w.contentEvents)
				}
				at := func(k int) time.Duration { return time.Duration(k+1) * time.Millisecond }
				r := &got.rec
				if r.ISL != w.isl || r.OSL != w.osl || r.UsageSource != UsageUpstream {
					t.Errorf("isl %d osl %d source %v, want %d %d usage", r.ISL, r.OSL, r.UsageSource, w.isl, w.osl)
				}
				if r.Events != w.tokenEvents || r.TTFT != at(w.firstToken) || r.E2E != at(w.lastToken) || r.TTFTContent != at(w.firstContent) {
					t.Errorf("events %d ttft %v e2e %v ttft_content %v, want %d %v %v %v", r.Events, r.TTFT, r.E2E, r.TTFTContent,
						w.tokenEvents, at(w.firstToken), at(w.lastToken), at(w.firstContent))
				}
				var sum time.Duration
				for _, g := range r.ITL {
					sum += g
				}
				if len(r.ITL) != w.tokenEvents-1 || sum != at(w.lastToken)-at(w.firstToken) || r.MaxITL != time.Duration(w.maxGap)*time.Millisecond {
					t.Errorf("%d gaps summing to %v, max %v; want %d, %v, %dms", len(r.ITL), sum, r.MaxITL,
						w.tokenEvents-1, at(w.lastToken)-at(w.firstToken), w.maxGap)
				}
				if want := (r.E2E - r.TTFT) / time.Duration(w.osl-1); r.TPOT != want {
					t.Errorf("tpot %v, want %v", r.TPOT, want)
				}
			}
		})
	}
}

// parseOne parses a single SSE event of api.
func parseOne(t *testing.T, api API, raw string) EventInfo {
	t.Helper()
	var (
		f    SSEFramer
		ev   Event
		info EventInfo
		p    StreamParser
	)
	f.Feed([]byte(raw + "\n\n"))
	if ok, err := f.Next(&ev); !ok || err != nil {
		t.Fatalf("no event in %q: %v", raw, err)
	}
	if err := p.Parse(api, &ev, &info); err != nil {
		t.Fatalf("parse %q: %v", raw, err)
	}
	info.ErrorMessage = cloneBytes(info.ErrorMessage)
	return info
}

// eventCase is one SSE event of an API and what its parser must say of it.
type eventCase struct {
	name, raw string
	want      EventInfo
}

// checkEvents parses each case's event as api's stream parser does.
func checkEvents(t *testing.T, api API, cases []eventCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := parseOne(t, api, c.raw)
			if !eventInfosEqual(got, c.want) {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestResponsesEvents(t *testing.T) {
	checkEvents(t, APIResponses, []eventCase{
		{"delta", `data: {"type":"response.output_text.delta","delta":"Hi"}`,
			EventInfo{Token: true, Content: true, PromptTokens: Unknown, CompletionTokens: Unknown}},
		{"empty delta", `data: {"type":"response.output_text.delta","delta":""}`,
			EventInfo{Token: true, PromptTokens: Unknown, CompletionTokens: Unknown}},
		// The type from the event line when the JSON has none.
		{"event line", "event: response.reasoning_text.delta\ndata: {\"delta\":\"so\"}",
			EventInfo{Token: true, Content: true, PromptTokens: Unknown, CompletionTokens: Unknown}},
		{"done event", `data: {"type":"response.output_text.done","text":"Hi"}`,
			EventInfo{PromptTokens: Unknown, CompletionTokens: Unknown}},
		{"created", `data: {"type":"response.created","response":{"status":"in_progress","error":null,"usage":null}}`,
			EventInfo{PromptTokens: Unknown, CompletionTokens: Unknown}},
		{"incomplete", `data: {"type":"response.incomplete","response":{"status":"incomplete","usage":{"input_tokens":7,"output_tokens":16}}}`,
			EventInfo{Done: true, Finish: true, HasUsage: true, UsageOnly: true, PromptTokens: 7, CompletionTokens: 16}},
		{"failed", `data: {"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"engine died"},"usage":null}}`,
			EventInfo{Done: true, Finish: true, Error: true, ErrorMessage: []byte("engine died"), PromptTokens: Unknown, CompletionTokens: Unknown}},
		{"error event", "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"slow down\"}",
			EventInfo{Error: true, ErrorMessage: []byte("slow down"), PromptTokens: Unknown, CompletionTokens: Unknown}},
	})
}

func TestMessagesEvents(t *testing.T) {
	checkEvents(t, APIMessages, []eventCase{
		{"text", `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`,
			EventInfo{Token: true, Content: true, PromptTokens: Unknown, CompletionTokens: Unknown}},
		{"tool input", `data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a"}}`,
			EventInfo{Token: true, Content: true, PromptTokens: Unknown, CompletionTokens: Unknown}},
		{"signature", `data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}`,
			EventInfo{PromptTokens: Unknown, CompletionTokens: Unknown}},
		// SGLang's message_start: 0 input tokens is a placeholder.
		{"start placeholder", `data: {"type":"message_start","message":{"usage":{"input_tokens":0,"output_tokens":0}}}`,
			EventInfo{HasUsage: true, UsageOnly: true, PromptTokens: Unknown, CompletionTokens: Unknown}},
		// vLLM's message_start: output_tokens is a placeholder, not a count.
		{"start", `data: {"type":"message_start","message":{"usage":{"input_tokens":20,"cache_read_input_tokens":100,"output_tokens":1}}}`,
			EventInfo{HasUsage: true, UsageOnly: true, PromptTokens: 120, CompletionTokens: Unknown}},
		{"delta without input", `data: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":64}}`,
			EventInfo{HasUsage: true, UsageOnly: true, Finish: true, PromptTokens: Unknown, CompletionTokens: 64}},
		{"stop", "event: message_stop\ndata: {\"type\":\"message_stop\"}",
			EventInfo{Done: true, PromptTokens: Unknown, CompletionTokens: Unknown}},
		{"ping", "event: ping\ndata: {\"type\": \"ping\"}",
			EventInfo{PromptTokens: Unknown, CompletionTokens: Unknown}},
		{"error", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}",
			EventInfo{Error: true, ErrorMessage: []byte("Overloaded"), PromptTokens: Unknown, CompletionTokens: Unknown}},
	})
}

func eventInfosEqual(a, b EventInfo) bool {
	if string(a.ErrorMessage) != string(b.ErrorMessage) {
		return false
	}
	a.ErrorMessage, b.ErrorMessage = nil, nil
	return reflect.DeepEqual(a, b)
}

func TestResponsesAndMessagesBodies(t *testing.T) {
	for _, c := range []struct {
		name string
		api  API
		body string
		want EventInfo
	}{
		{"response", APIResponses, `{"object":"response","status":"completed","error":null,"output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}],"usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":32},"output_tokens":87}}`,
			EventInfo{Token: true, Content: true, Finish: true, HasUsage: true, PromptTokens: 36, CompletionTokens: 87}},
		{"failed response", APIResponses, `{"object":"response","status":"failed","error":{"code":"server_error","message":"boom"},"output":[],"usage":null}`,
			EventInfo{Error: true, ErrorMessage: []byte("boom"), PromptTokens: Unknown, CompletionTokens: Unknown}},
		{"message", APIMessages, `{"type":"message","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"cache_creation_input_tokens":5,"output_tokens":2}}`,
			EventInfo{Token: true, Content: true, Finish: true, HasUsage: true, PromptTokens: 15, CompletionTokens: 2}},
		{"message error", APIMessages, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: field required"}}`,
			EventInfo{Error: true, ErrorMessage: []byte("max_tokens: field required"), PromptTokens: Unknown, CompletionTokens: Unknown}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got EventInfo
			if err := ParseResponseBody(c.api, []byte(c.body), 1, &got); err != nil {
				t.Fatal(err)
			}
			if !eventInfosEqual(got, c.want) {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// llama.cpp's Responses API stream sends every reasoning chunk twice, as a
// summary delta and a reasoning-text delta with the same text: one token
// event per chunk. A stream of one kind only (OpenAI's summaries, vLLM's
// reasoning text), or two kinds with different texts, counts every delta.
func TestResponsesReasoningSentTwice(t *testing.T) {
	ev := func(kind, text string) string {
		return "event: response." + kind + ".delta\ndata: {\"type\":\"response." + kind + ".delta\",\"delta\":\"" + text + "\"}\n\n"
	}
	llama := ev("reasoning_summary_text", "Let") + ev("reasoning_text", "Let") +
		ev("reasoning_summary_text", " me") + ev("reasoning_text", " me") +
		ev("reasoning_summary_text", " me") + ev("reasoning_text", " me") +
		ev("output_text", "Hi")
	for _, c := range []struct {
		name   string
		stream string
		tokens int
	}{
		{"llama.cpp pairs", llama, 4},
		{"reasoning text first", ev("reasoning_text", "a") + ev("reasoning_summary_text", "a") + ev("reasoning_text", "b") + ev("reasoning_summary_text", "b"), 2},
		{"summaries only", ev("reasoning_summary_text", "a") + ev("reasoning_summary_text", "a") + ev("output_text", "b"), 3},
		{"different texts", ev("reasoning_summary_text", "a") + ev("reasoning_text", "b"), 2},
	} {
		got := runMeter([]byte(c.stream), nil, newParser(APIResponses))
		if got.rec.Events != c.tokens || len(got.rec.ITL) != c.tokens-1 {
			t.Errorf("%s: %d token events, gaps %v; want %d", c.name, got.rec.Events, got.rec.ITL, c.tokens)
		}
	}
}

// The parser keeps the previous reasoning delta and a copy of the last
// error message in one buffer (so that the echo's digests fit in its
// size): a message copied after a delta leaves the delta to tell the next
// one by, and is whole until the next Parse.
func TestReasoningDeltaAndErrorShareABuffer(t *testing.T) {
	var (
		p    StreamParser
		info EventInfo
	)
	p.Reset()
	parse := func(typ, data string) {
		ev := Event{Type: []byte(typ), Data: []byte(data), HasData: true}
		if err := p.Parse(APIResponses, &ev, &info); err != nil {
			t.Fatal(err)
		}
	}
	const msg = "a message longer than the delta"
	parse("error", `{"type":"response.reasoning_summary_text.delta","delta":"Let","message":"`+msg+`"}`)
	if !info.Error || string(info.ErrorMessage) != msg {
		t.Fatalf("error %v %q, want %q", info.Error, info.ErrorMessage, msg)
	}
	parse("response.reasoning_text.delta", `{"type":"response.reasoning_text.delta","delta":"Let"}`)
	if info.Token {
		t.Error("the second copy of a reasoning delta, after an error message: a token event")
	}
}

// Nothing after a stream's end marker counts: a second final event, deltas
// or usage after it do not change what the response said (found by a
// hostile-engine probe: two deltas after response.completed made 5 events
// of an OSL of 3, and a usage after message_stop replaced the count).
func TestNothingCountsAfterTheEnd(t *testing.T) {
	delta := "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n"
	completed := func(in, out int) string {
		return "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":" +
			strconv.Itoa(in) + ",\"output_tokens\":" + strconv.Itoa(out) + "}}}\n\n"
	}
	mdelta := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n"
	musage := func(out int) string {
		return "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":" + strconv.Itoa(out) + "}}\n\n"
	}
	stop := "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	for _, c := range []struct {
		name, stream string
		api          API
	}{
		{"deltas after response.completed", delta + delta + delta + completed(7, 3) + delta + delta, APIResponses},
		{"a second response.completed", delta + delta + delta + completed(7, 3) + completed(1, 1), APIResponses},
		{"a delta and a usage after message_stop", mdelta + mdelta + mdelta + musage(3) + stop + mdelta + musage(99), APIMessages},
	} {
		got := runMeter([]byte(c.stream), nil, newParser(c.api))
		if got.rec.Events != 3 || got.rec.OSL != 3 {
			t.Errorf("%s: %d events, OSL %d; want 3 and 3", c.name, got.rec.Events, got.rec.OSL)
		}
	}
}

// A token count is a whole number up to two billion or unknown: 1.5 tokens,
// 2^53 or a sum of cache counts past the bound is a broken or hostile
// engine's, and flowed into the limits, the admin API's sums and the
// goodput in tokens per second (found by a hostile-engine probe: an ISL of
// 27,021,597,764,222,973 from three counts of 2^53 − 1).
func TestCountsAreBelievable(t *testing.T) {
	for _, c := range []struct {
		usage    string
		isl, osl int
	}{
		{`"input_tokens":7,"output_tokens":3`, 7, 3},
		{`"input_tokens":2147483647,"output_tokens":0`, 2147483647, 0},
		{`"input_tokens":2147483648,"output_tokens":1.5`, Unknown, Unknown},
		{`"input_tokens":9007199254740991,"output_tokens":1e300`, Unknown, Unknown},
		{`"input_tokens":7.0,"output_tokens":-1`, 7, Unknown},
		{`"input_tokens":1000000000,"cache_read_input_tokens":1000000000,"cache_creation_input_tokens":1000000000,"output_tokens":2`, Unknown, 2},
		{`"input_tokens":10,"cache_read_input_tokens":2.5,"output_tokens":2`, 10, 2},
	} {
		var info EventInfo
		info.PromptTokens, info.CompletionTokens = Unknown, Unknown
		if err := ParseResponseBody(APIMessages, []byte(`{"type":"message","content":[],"usage":{`+c.usage+`}}`), 1, &info); err != nil {
			t.Fatal(err)
		}
		if info.PromptTokens != c.isl || info.CompletionTokens != c.osl {
			t.Errorf("usage {%s}: prompt %d, completion %d; want %d, %d", c.usage, info.PromptTokens, info.CompletionTokens, c.isl, c.osl)
		}
	}
}

// An event after the end marker has no gap to summarise: the latest gap of
// a long stream (past the kept gaps) is not reported again for it (found by
// review: the gateway's gap sink got the last gap twice).
func TestNoSummarisedGapAfterTheEnd(t *testing.T) {
	var m Meter
	t0 := time.Now()
	m.Start(t0)
	tok := EventInfo{Token: true, Content: true, PromptTokens: Unknown, CompletionTokens: Unknown}
	for i := 0; i <= MaxKeptGaps+1; i++ {
		m.Observe(&tok, t0.Add(time.Duration(i)*time.Millisecond))
	}
	if _, ok := m.SummarisedGap(); !ok {
		t.Fatal("the last gap of a long stream is not summarised")
	}
	m.Observe(&EventInfo{Done: true, PromptTokens: Unknown, CompletionTokens: Unknown}, t0.Add(time.Hour))
	m.Observe(&tok, t0.Add(2*time.Hour))
	if _, ok := m.SummarisedGap(); ok {
		t.Fatal("a token event after the end reports a gap")
	}
}

// A stream of several choices whose indexes pass 63: one choice's end does
// not make another's later chunk (empty text, a running count) a usage
// trailer, as below 64 (a review found the first version's one flag for
// every index above 63 did).
func TestSeveralChoicesAboveIndex63(t *testing.T) {
	chunk := func(i int, text, finish string, done int) string {
		return fmt.Sprintf(`data: {"choices":[{"index":%d,"text":%q,"finish_reason":%s}],"usage":{"prompt_tokens":3,"completion_tokens":%d}}`+"\n\n", i, text, finish, done)
	}
	for _, base := range []int{1, 64} {
		a, b := base, base+1
		stream := chunk(a, "x", "null", 1) + chunk(b, "y", "null", 1) +
			chunk(a, "", `"length"`, 2) + chunk(b, "", "null", 2) + chunk(b, "z", `"length"`, 3) + "data: [DONE]\n\n"
		got := runMeter([]byte(stream), nil, newParser(APICompletions))
		if got.rec.Events != 5 {
			t.Errorf("indexes %d and %d: %d token events, want 5 (the second choice's empty chunk after the first's end is output)", a, b, got.rec.Events)
		}
	}
}
