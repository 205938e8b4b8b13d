package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
)

// typedEvent is one event of a Responses or Messages API stream: its
// `event:` line and its JSON.
type typedEvent struct {
	name string
	data map[string]any
}

// typedEvents splits a stream of typed events, checking that each has an
// `event:` line naming the JSON's "type" and one data line of JSON.
func typedEvents(t *testing.T, body string) []typedEvent {
	t.Helper()
	var out []typedEvent
	for i, ev := range events(t, body) {
		name, data, ok := strings.Cut(ev, "\n")
		if !ok || !strings.HasPrefix(name, "event: ") || !strings.HasPrefix(data, "data: ") || strings.Contains(data, "\n") {
			t.Fatalf("event %d is not an event: line and a data: line: %q", i, ev)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &m); err != nil {
			t.Fatalf("event %d: %v: %q", i, err, data)
		}
		name = strings.TrimPrefix(name, "event: ")
		if m["type"] != name {
			t.Fatalf("event %d: event: %s but type %v", i, name, m["type"])
		}
		out = append(out, typedEvent{name, m})
	}
	return out
}

func names(evs []typedEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.name
	}
	return out
}

// get walks a decoded JSON document along keys (object members, or
// decimal indexes of arrays).
func get(v any, keys ...string) any {
	for _, k := range keys {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			var i int
			fmt.Sscan(k, &i)
			if i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// meterTrace meters body as the gateway would, stamping its i-th event
// with the time the simulator flushed it (tr.Events[i]), from tr.Start. It
// checks that the parser's token events are exactly the ones the trace
// calls token events.
func meterTrace(t *testing.T, api meter.API, body string, tr Trace) meter.Record {
	t.Helper()
	var (
		f    meter.SSEFramer
		p    meter.StreamParser
		m    meter.Meter
		ev   meter.Event
		info meter.EventInfo
		rec  meter.Record
	)
	f.Reset()
	m.Start(tr.Start)
	r := strings.NewReader(body)
	k := 0
	for {
		_, err := f.FillFrom(r)
		for {
			var ok bool
			var ferr error
			if err == io.EOF {
				ok, ferr = f.Flush(&ev)
			} else {
				ok, ferr = f.Next(&ev)
			}
			if ferr != nil {
				t.Fatal(ferr)
			}
			if !ok {
				break
			}
			if k >= len(tr.Events) {
				t.Fatalf("more events in the body than the trace's %d", len(tr.Events))
			}
			if perr := p.Parse(api, &ev, &info); perr != nil && tr.Events[k].Kind != EventMalformed {
				t.Fatalf("event %d (%v): %v", k, tr.Events[k].Kind, perr)
			}
			if info.Token != tr.Events[k].Kind.IsToken() {
				t.Fatalf("event %d: the parser says token %v, the trace %v", k, info.Token, tr.Events[k].Kind)
			}
			m.Observe(&info, tr.Events[k].At)
			k++
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if k != len(tr.Events) {
		t.Fatalf("%d events in the body, %d in the trace", k, len(tr.Events))
	}
	m.Finish(&rec)
	return rec
}

// checkMetered checks a metered record of n tokens against the linear
// schedule TTFT, ITL: TTFT and every ITL gap as the simulator flushed them,
// never early, and usage from the engine.
func checkMetered(t *testing.T, rec meter.Record, n, isl int, ttft, itl time.Duration) []string {
	t.Helper()
	if rec.Events != n || rec.ISL != isl || rec.OSL != n || rec.UsageSource != meter.UsageUpstream {
		t.Fatalf("record: events %d ISL %d OSL %d usage %v; want %d, %d, %d, upstream", rec.Events, rec.ISL, rec.OSL, rec.UsageSource, n, isl, n)
	}
	var problems []string
	if rec.TTFT < ttft {
		t.Fatalf("TTFT %v before the schedule's %v", rec.TTFT, ttft)
	} else if rec.TTFT > ttft+slack {
		problems = append(problems, fmt.Sprintf("TTFT %v, want %v (+%v)", rec.TTFT, ttft, slack))
	}
	if len(rec.ITL) != n-1 {
		t.Fatalf("%d ITL gaps, want %d", len(rec.ITL), n-1)
	}
	for i, g := range rec.ITL {
		if g < itl-slack || g > itl+slack {
			problems = append(problems, fmt.Sprintf("gap %d: %v, want %v", i+1, g, itl))
		}
	}
	if e2e := ttft + time.Duration(n-1)*itl; rec.E2E < e2e || rec.E2E > e2e+slack {
		problems = append(problems, fmt.Sprintf("E2E %v, want %v", rec.E2E, e2e))
	}
	return problems
}

const (
	respInstructions = "You are terse."
	respInput        = "Say three words please"
)

func TestResponsesStream(t *testing.T) {
	const n, ttft, itl = 6, 30 * time.Millisecond, 10 * time.Millisecond
	h := start(t, Config{TTFT: ttft, ITL: itl, Seed: 7})
	isl := ChatPromptTokens(respInstructions, respInput)
	retryTiming(t, func(try int) []string {
		id := fmt.Sprintf("resp-%d", try)
		status, body, resp := h.post("/v1/responses", `{"model":"sim-llama","instructions":"`+respInstructions+`","input":"`+respInput+`","max_output_tokens":6,"stream":true}`, "X-Request-Id", id)
		if status != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
			t.Fatalf("%d %s: %s", status, resp.Header.Get("Content-Type"), body)
		}
		evs := typedEvents(t, body)
		want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
		for range n {
			want = append(want, "response.output_text.delta")
		}
		want = append(want, "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed")
		if got := names(evs); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("events\n%v\nwant\n%v", got, want)
		}
		var text strings.Builder
		for i, e := range evs {
			if seq := e.data["sequence_number"]; seq != float64(i) {
				t.Fatalf("event %d (%s): sequence_number %v", i, e.name, seq)
			}
			if e.name == "response.output_text.delta" {
				if e.data["item_id"] != "msg_"+id {
					t.Fatalf("delta item_id %v", e.data["item_id"])
				}
				text.WriteString(e.data["delta"].(string))
			}
		}
		full := OutputText(7, n)
		if text.String() != full || get(evs[4+n].data, "text") != full || get(evs[4+n+1].data, "part", "text") != full ||
			get(evs[4+n+2].data, "item", "content", "0", "text") != full {
			t.Fatalf("text: deltas %q, done events %v / %v / %v, want %q", text.String(), get(evs[4+n].data, "text"),
				get(evs[4+n+1].data, "part", "text"), get(evs[4+n+2].data, "item", "content", "0", "text"), full)
		}
		if get(evs[0].data, "response", "id") != "resp_"+id || get(evs[0].data, "response", "status") != "in_progress" ||
			get(evs[0].data, "response", "usage") != nil || get(evs[0].data, "response", "max_output_tokens") != float64(n) {
			t.Fatalf("response.created: %v", evs[0].data)
		}
		final := evs[len(evs)-1].data["response"]
		if get(final, "status") != "incomplete" || get(final, "incomplete_details", "reason") != "max_output_tokens" ||
			get(final, "usage", "input_tokens") != float64(isl) || get(final, "usage", "output_tokens") != float64(n) ||
			get(final, "usage", "total_tokens") != float64(isl+n) || get(final, "output", "0", "content", "0", "text") != full {
			t.Fatalf("response.completed: %v", final)
		}
		tr := h.waitTrace(id)
		if tr.Path != "/v1/responses" || tr.PromptTokens != isl || tr.CompletionTokens != n || tr.Ending != EndComplete {
			t.Fatalf("trace %+v", tr)
		}
		// response.created and in_progress go out at once, before TTFT.
		if d := tr.Events[1].At.Sub(tr.Start); d >= ttft {
			t.Errorf("response.in_progress %v after the start, want before TTFT %v", d, ttft)
		}
		return checkMetered(t, meterTrace(t, meter.APIResponses, body, tr), n, isl, ttft, itl)
	})
}

func TestMessagesStream(t *testing.T) {
	const n, ttft, itl = 5, 30 * time.Millisecond, 10 * time.Millisecond
	h := start(t, Config{TTFT: ttft, ITL: itl, NaturalLength: n, Seed: 3})
	isl := ChatPromptTokens("Be brief.", "Hello there", "Hi", "Count to five")
	retryTiming(t, func(try int) []string {
		id := fmt.Sprintf("msg-%d", try)
		status, body, resp := h.post("/v1/messages", `{"model":"sim-llama","system":[{"type":"text","text":"Be brief."}],"messages":[{"role":"user","content":"Hello there"},{"role":"assistant","content":[{"type":"text","text":"Hi"}]},{"role":"user","content":"Count to five"}],"max_tokens":64,"stream":true}`, "X-Request-Id", id)
		if status != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
			t.Fatalf("%d %s: %s", status, resp.Header.Get("Content-Type"), body)
		}
		evs := typedEvents(t, body)
		want := []string{"message_start", "content_block_start"}
		for range n {
			want = append(want, "content_block_delta")
		}
		want = append(want, "content_block_stop", "message_delta", "message_stop")
		if got := names(evs); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("events\n%v\nwant\n%v", got, want)
		}
		var text strings.Builder
		for _, e := range evs[2 : 2+n] {
			if get(e.data, "delta", "type") != "text_delta" || get(e.data, "index") != float64(0) {
				t.Fatalf("delta %v", e.data)
			}
			text.WriteString(get(e.data, "delta", "text").(string))
		}
		if text.String() != OutputText(3, n) {
			t.Fatalf("text %q, want %q", text.String(), OutputText(3, n))
		}
		start := evs[0].data
		if get(start, "message", "id") != "chatcmpl-"+id || get(start, "message", "model") != "sim-llama" ||
			get(start, "message", "usage", "input_tokens") != float64(isl) || get(start, "message", "usage", "output_tokens") != float64(0) {
			t.Fatalf("message_start %v", start)
		}
		md := evs[len(evs)-2].data
		if get(md, "delta", "stop_reason") != "end_turn" || get(md, "usage", "output_tokens") != float64(n) || get(md, "usage", "input_tokens") != float64(isl) {
			t.Fatalf("message_delta %v", md)
		}
		tr := h.waitTrace(id)
		if tr.Path != "/v1/messages" || tr.PromptTokens != isl || tr.CompletionTokens != n || tr.FinishReason != "stop" {
			t.Fatalf("trace %+v", tr)
		}
		// message_start and content_block_start go with the first token.
		if tr.Events[0].At.Before(tr.Start.Add(ttft)) {
			t.Fatalf("message_start %v after the start, before TTFT", tr.Events[0].At.Sub(tr.Start))
		}
		return checkMetered(t, meterTrace(t, meter.APIMessages, body, tr), n, isl, ttft, itl)
	})
}

// The Responses API's input as a list of messages counts as chat messages.
func TestResponsesInputList(t *testing.T) {
	h := start(t, Config{})
	status, body, _ := h.post("/v1/responses", `{"input":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"input_text","text":"one two three"}]}],"max_output_tokens":3}`)
	var info meter.EventInfo
	if err := meter.ParseResponseBody(meter.APIResponses, []byte(body), 1, &info); status != 200 || err != nil {
		t.Fatalf("%d %v: %s", status, err, body)
	}
	if want := ChatPromptTokens("Be brief.", "one two three"); info.PromptTokens != want || info.CompletionTokens != 3 {
		t.Fatalf("usage %d %d, want %d 3: %s", info.PromptTokens, info.CompletionTokens, want, body)
	}
}

func TestResponsesAndMessagesNonStreaming(t *testing.T) {
	h := start(t, Config{NaturalLength: 4, Seed: 5})
	for _, c := range []struct {
		api    meter.API
		path   string
		body   string
		n, isl int
		check  func(m map[string]any) bool
	}{
		{meter.APIResponses, "/v1/responses", `{"input":"a b c","max_output_tokens":10}`, 4, ChatPromptTokens("a b c"), func(m map[string]any) bool {
			return m["object"] == "response" && m["status"] == "completed" && m["incomplete_details"] == nil &&
				get(m, "output", "0", "content", "0", "text") == OutputText(5, 4)
		}},
		{meter.APIResponses, "/v1/responses", `{"input":"a b c","max_output_tokens":2}`, 2, ChatPromptTokens("a b c"), func(m map[string]any) bool {
			return m["status"] == "incomplete" && get(m, "incomplete_details", "reason") == "max_output_tokens"
		}},
		{meter.APIMessages, "/v1/messages", `{"system":"x y","messages":[{"role":"user","content":"a b c"}],"max_tokens":10}`, 4, ChatPromptTokens("x y", "a b c"), func(m map[string]any) bool {
			return m["type"] == "message" && m["role"] == "assistant" && m["stop_reason"] == "end_turn" &&
				get(m, "content", "0", "type") == "text" && get(m, "content", "0", "text") == OutputText(5, 4)
		}},
		{meter.APIMessages, "/v1/messages", `{"messages":[{"role":"user","content":"a b c"}],"max_tokens":3,"stream":false}`, 3, ChatPromptTokens("a b c"), func(m map[string]any) bool {
			return m["stop_reason"] == "max_tokens"
		}},
	} {
		status, body, resp := h.post(c.path, c.body)
		if status != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %s", c.body, status, body)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(body), &m); err != nil || !c.check(m) {
			t.Errorf("%s: %v: %s", c.body, err, body)
		}
		var info meter.EventInfo
		if err := meter.ParseResponseBody(c.api, []byte(body), 1, &info); err != nil || !info.HasUsage || !info.Token || !info.Finish ||
			info.PromptTokens != c.isl || info.CompletionTokens != c.n || info.Error {
			t.Errorf("%s: meter reads %+v (%v), want ISL %d OSL %d", c.body, info, err, c.isl, c.n)
		}
	}
}

// Anthropic requires max_tokens; errors on /v1/messages have Anthropic's
// shape, on /v1/responses vLLM's OpenAI shape.
func TestMessagesErrors(t *testing.T) {
	h := start(t, Config{})
	for _, c := range []struct {
		path, body, hdr string
		status          int
		want            string
	}{
		{"/v1/messages", `{"model":"sim-llama","messages":[{"role":"user","content":"hi"}],"stream":true}`, "", 400,
			`{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`},
		{"/v1/messages", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, "", 400,
			`{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens must be at least 1, got 0."}}`},
		{"/v1/messages", `{"model":"other","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`, "", 404,
			`{"type":"error","error":{"type":"not_found_error","message":"The model ` + "`other`" + ` does not exist."}}`},
		{"/v1/messages", `{"max_tokens":4}`, "", 400,
			`{"type":"error","error":{"type":"invalid_request_error","message":"sim: messages must be an array"}}`},
		{"/v1/messages", `{"messages":[],"max_tokens":4}`, "status=529", 529,
			`{"type":"error","error":{"type":"overloaded_error","message":"sim: injected status 529 (X-Sim-Fault)"}}`},
		{"/v1/messages", `{"messages":[],"max_tokens":4}`, "error-at=1", 500,
			`{"type":"error","error":{"type":"api_error","message":"sim: injected error (X-Sim-Fault error-at)"}}`},
		{"/v1/responses", `{"max_output_tokens":4}`, "", 400,
			`{"error":{"message":"sim: input is required","type":"BadRequestError","param":null,"code":400}}`},
		{"/v1/responses", `{"input":"hi","max_output_tokens":0}`, "", 400,
			`{"error":{"message":"max_output_tokens must be at least 1, got 0.","type":"BadRequestError","param":null,"code":400}}`},
	} {
		var hdr []string
		if c.hdr != "" {
			hdr = []string{"X-Sim-Fault", c.hdr}
		}
		status, body, _ := h.post(c.path, c.body, hdr...)
		if status != c.status || body != c.want {
			t.Errorf("%s %s: %d %s\nwant %d %s", c.path, c.body, status, body, c.status, c.want)
		}
	}
	// A method other than POST: 405, in the API's shape too.
	resp := h.do("GET", "/v1/messages", "")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 405 || !strings.HasPrefix(string(b), `{"type":"error","error":{"type":"invalid_request_error"`) {
		t.Errorf("GET /v1/messages: %d %s", resp.StatusCode, b)
	}
}

// error-at and malformed-at in the two APIs' streams: the meter sees the
// error event, or an event it cannot read, where the trace says.
func TestResponsesAndMessagesStreamFaults(t *testing.T) {
	h := start(t, Config{})
	for _, c := range []struct {
		api        meter.API
		path, body string
		errName    string
	}{
		{meter.APIResponses, "/v1/responses", `{"input":"hi","max_output_tokens":5,"stream":true}`, "error"},
		{meter.APIMessages, "/v1/messages", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true}`, "error"},
	} {
		id := "fault-" + c.path
		status, body, _ := h.post(c.path, c.body, "X-Request-Id", id, "X-Sim-Fault", "error-at=3")
		if status != 200 {
			t.Fatal(status, body)
		}
		evs := typedEvents(t, body)
		if last := evs[len(evs)-1]; last.name != c.errName || !strings.Contains(body, "sim: injected error at token 3") {
			t.Fatalf("%s: last event %v", c.path, last)
		}
		tr := h.waitTrace(id)
		rec := meterTrace(t, c.api, body, tr)
		if rec.Events != 2 {
			t.Errorf("%s: %d token events before the error, want 2", c.path, rec.Events)
		}

		id = "malformed-" + c.path
		_, body, _ = h.post(c.path, c.body, "X-Request-Id", id, "X-Sim-Fault", "malformed-at=2")
		tr = h.waitTrace(id)
		if rec := meterTrace(t, c.api, body, tr); rec.Events != 4 || rec.OSL != 5 {
			t.Errorf("%s malformed-at=2: events %d OSL %d, want 4 5", c.path, rec.Events, rec.OSL)
		}
	}
}

// The batching engine serves the two APIs as it serves chat: the same
// schedule (its token times), the same usage.
func TestResponsesAndMessagesBatching(t *testing.T) {
	cfg := testCfg()
	cfg.StepBase = 2 * time.Millisecond
	b, err := NewBatching(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	h := start(t, Config{Scheduler: b})
	for _, c := range []struct {
		api        meter.API
		path, body string
	}{
		{meter.APIResponses, "/v1/responses", `{"input":"one two","max_output_tokens":8,"stream":true}`},
		{meter.APIMessages, "/v1/messages", `{"messages":[{"role":"user","content":"one two"}],"max_tokens":8,"stream":true}`},
	} {
		id := "batch-" + c.path
		status, body, _ := h.post(c.path, c.body, "X-Request-Id", id)
		if status != 200 {
			t.Fatal(status, body)
		}
		tr := h.waitTrace(id)
		rec := meterTrace(t, c.api, body, tr)
		if rec.Events != 8 || rec.ISL != ChatPromptTokens("one two") || rec.OSL != 8 || rec.UsageSource != meter.UsageUpstream {
			t.Errorf("%s: %+v", c.path, rec)
		}
		// Engine steps last at least StepBase: no two tokens at once. The
		// stamps are flush times, and a flush made late (a loaded machine)
		// shortens the gap after it by as much: each gap is only checked
		// to be one, and their sum to hold the steps, less one step for the
		// first flush's lateness.
		var sum time.Duration
		for i, g := range rec.ITL {
			if g <= 0 {
				t.Errorf("%s: gap %d is %v: two tokens at once", c.path, i+1, g)
			}
			sum += g
		}
		if want := time.Duration(len(rec.ITL)-1) * cfg.StepBase; sum < want {
			t.Errorf("%s: gaps %v add up to %v, under %d steps (%v)", c.path, rec.ITL, sum, len(rec.ITL)-1, want)
		}
	}
}

// Building a token event of either API allocates nothing.
func TestEventAPIsTokenEventAllocs(t *testing.T) {
	s := New(Config{MaxTraces: -1})
	defer s.Shutdown()
	for _, api := range []apiKind{apiResponses, apiMessages} {
		st := newBenchStream(s, api, 1000, true, false)
		i := 0
		if n := testenv.AllocsPerRun(200, func() { i++; st.tokenEvent(i) }); n != 0 {
			t.Errorf("%s: %v allocations per token event", api.path(), n)
		}
	}
}
