package sim

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var createdRE = regexp.MustCompile(`"created":(\d+)`)

// created returns the "created" value of the first event and checks that it
// is the current Unix time (give or take a minute).
func created(t *testing.T, body string) string {
	t.Helper()
	m := createdRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no created field in %q", body)
	}
	c, _ := strconv.ParseInt(m[1], 10, 64)
	if d := time.Now().Unix() - c; d < -60 || d > 60 {
		t.Fatalf("created = %d, want about now", c)
	}
	return m[1]
}

// chatWant builds the stream the simulator must send for a chat request of
// n tokens with the given seed. usage: "" (no stream_options), "null"
// (include_usage) or "continuous".
func chatWant(id, created string, seed int64, n, prompt int, finish, usage string) string {
	head := `data: {"id":"chatcmpl-` + id + `","object":"chat.completion.chunk","created":` + created + `,"model":"sim-llama","choices":[`
	u := func(k int) string {
		switch usage {
		case "null":
			return "" // include_usage: vLLM 0.24 leaves the key out of chat chunks
		case "continuous":
			return fmt.Sprintf(`,"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}`, prompt, prompt+k, k)
		}
		return ""
	}
	var b strings.Builder
	b.WriteString(head + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]` + u(0) + "}\n\n")
	for i := 1; i <= n; i++ {
		b.WriteString(head + `{"index":0,"delta":{"content":"` + TokenText(seed, i) + `"},"logprobs":null,"finish_reason":null}]` + u(i) + "}\n\n")
	}
	b.WriteString(head + `{"index":0,"delta":{},"logprobs":null,"finish_reason":"` + finish + `","stop_reason":null}]` + u(n) + "}\n\n")
	if usage != "" {
		b.WriteString(head + fmt.Sprintf(`],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}}`, prompt, prompt+n, n) + "\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

const chatMsgs = `"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say three words please"}]`

var chatISL = ChatPromptTokens("You are terse.", "Say three words please")

func TestChatStreamBytes(t *testing.T) {
	h := start(t, Config{Seed: 7})
	cases := []struct {
		name, opts, usage string
	}{
		{"no stream_options", ``, ""},
		{"include_usage false", `,"stream_options":{"include_usage":false}`, ""},
		{"include_usage", `,"stream_options":{"include_usage":true}`, "null"},
		{"stream_options present defaults include_usage", `,"stream_options":{}`, "null"},
		{"continuous_usage_stats", `,"stream_options":{"include_usage":true,"continuous_usage_stats":true}`, "continuous"},
		{"continuous needs include_usage", `,"stream_options":{"include_usage":false,"continuous_usage_stats":true}`, ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := "req-" + strconv.Itoa(i)
			status, body, resp := h.post("/v1/chat/completions", `{"model":"sim-llama",`+chatMsgs+`,"max_tokens":3,"stream":true`+c.opts+`}`, "X-Request-Id", id)
			if status != 200 {
				t.Fatalf("status %d: %s", status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
				t.Errorf("Content-Type = %q", ct)
			}
			if got := resp.Header.Get("X-Request-Id"); got != id {
				t.Errorf("X-Request-Id = %q, want %q", got, id)
			}
			if te := resp.TransferEncoding; !slices.Equal(te, []string{"chunked"}) {
				t.Errorf("Transfer-Encoding = %v, want chunked", te)
			}
			want := chatWant(id, created(t, body), 7, 3, chatISL, "length", c.usage)
			if body != want {
				t.Fatalf("body mismatch\n got: %q\nwant: %q", body, want)
			}
			tr := h.waitTrace(id)
			kinds := []EventKind{EventRole, EventToken, EventToken, EventToken, EventFinish}
			if c.usage != "" {
				kinds = append(kinds, EventUsage)
			}
			kinds = append(kinds, EventDone)
			if got := traceKinds(tr); !slices.Equal(got, kinds) {
				t.Errorf("trace kinds = %v, want %v", got, kinds)
			}
			if tr.PromptTokens != chatISL || tr.CompletionTokens != 3 || tr.FinishReason != "length" || !tr.Stream || tr.Status != 200 {
				t.Errorf("trace = %+v", tr)
			}
			if tr.Ending != EndComplete || !tr.DisconnectedAt.IsZero() {
				t.Errorf("ending = %v, disconnected %v", tr.Ending, tr.DisconnectedAt)
			}
		})
	}
}

func traceKinds(tr Trace) []EventKind {
	var k []EventKind
	for _, e := range tr.Events {
		k = append(k, e.Kind)
	}
	return k
}

// TestChatStreamMatchesVLLM compares the keys, and their order, of every
// kind of chunk with a recording of vLLM 0.24. Keys that vLLM version adds
// as nulls and the simulator leaves out (see the package doc) are dropped
// from the recording first.
func TestChatStreamMatchesVLLM(t *testing.T) {
	rec := events(t, fixture(t, "vllm/pai-crusoe-vllm0.24-chat-stream-include-usage.txt"))
	skip := map[string]bool{
		"prompt_token_ids": true, "prompt_text": true, "choices[].token_ids": true,
		"system_fingerprint": true, "usage.prompt_tokens_details": true, "usage.prompt_tokens_details.cached_tokens": true,
	}
	recKeys := func(ev string) []string {
		var out []string
		for _, k := range keyPaths(t, strings.TrimPrefix(ev, "data: ")) {
			if !skip[k] {
				out = append(out, k)
			}
		}
		return out
	}
	h := start(t, Config{})
	// vLLM 0.24 leaves "usage" out of the chunks before the usage chunk even
	// with include_usage; compare those with a stream without usage and the
	// usage chunk with one with it.
	_, plain, _ := h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":2,"stream":true}`)
	_, withUsage, _ := h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`)
	got := events(t, plain)
	gotU := events(t, withUsage)
	pairs := []struct {
		what      string
		rec, mine string
	}{
		{"role chunk", rec[0], got[0]},
		{"token chunk", rec[1], got[1]},
		{"finish chunk", rec[len(rec)-3], got[len(got)-2]},
		{"usage chunk", rec[len(rec)-2], gotU[len(gotU)-2]},
	}
	for _, p := range pairs {
		if w, g := recKeys(p.rec), keyPaths(t, strings.TrimPrefix(p.mine, "data: ")); !slices.Equal(w, g) {
			t.Errorf("%s keys:\n got %v\nvLLM %v", p.what, g, w)
		}
	}
	// The role chunk's delta and the finish chunk's empty delta are the same
	// values as vLLM's.
	for _, p := range []struct{ rec, mine, path string }{{rec[0], got[0], "delta"}, {rec[len(rec)-3], got[len(got)-2], "delta"}} {
		r := dataJSON(t, p.rec)["choices"].([]any)[0].(map[string]any)[p.path]
		m := dataJSON(t, p.mine)["choices"].([]any)[0].(map[string]any)[p.path]
		if fmt.Sprint(r) != fmt.Sprint(m) {
			t.Errorf("%s: got %v, vLLM %v", p.path, m, r)
		}
	}
	if rec[len(rec)-1] != "data: [DONE]" || got[len(got)-1] != "data: [DONE]" {
		t.Errorf("last events: vLLM %q, sim %q", rec[len(rec)-1], got[len(got)-1])
	}
}

func TestCompletionsStream(t *testing.T) {
	h := start(t, Config{Seed: 3, Model: "m/x"})
	prompt := "Once upon a time"
	isl := CompletionPromptTokens(prompt)
	for i, usage := range []string{"", "null", "continuous"} {
		opts := ""
		switch usage {
		case "null":
			opts = `,"stream_options":{"include_usage":true}`
		case "continuous":
			opts = `,"stream_options":{"include_usage":true,"continuous_usage_stats":true}`
		}
		id := "c" + strconv.Itoa(i)
		status, body, _ := h.post("/v1/completions", `{"model":"m/x","prompt":"`+prompt+`","max_tokens":4,"stream":true`+opts+`}`, "X-Request-Id", id)
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		cr := created(t, body)
		head := `data: {"id":"cmpl-` + id + `","object":"text_completion","created":` + cr + `,"model":"m/x","choices":[`
		u := func(k int) string {
			if usage == "continuous" {
				return fmt.Sprintf(`,"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}`, isl, isl+k, k)
			}
			return `,"usage":null`
		}
		var want strings.Builder
		for k := 1; k <= 4; k++ {
			want.WriteString(head + `{"index":0,"text":"` + TokenText(3, k) + `","logprobs":null,"finish_reason":null,"stop_reason":null}]` + u(k) + "}\n\n")
		}
		want.WriteString(head + `{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null}]` + u(4) + "}\n\n")
		if usage != "" {
			want.WriteString(head + fmt.Sprintf(`],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":4}}`, isl, isl+4) + "\n\n")
		}
		want.WriteString("data: [DONE]\n\n")
		if body != want.String() {
			t.Fatalf("usage=%q: body mismatch\n got: %q\nwant: %q", usage, body, want.String())
		}
	}

	// Same keys in the same order as vLLM's completions stream.
	rec := events(t, fixture(t, "vllm/oll-vllm-completions-stream-opt125m.txt"))
	_, body, _ := h.post("/v1/completions", `{"prompt":"hi","max_tokens":2,"stream":true}`)
	got := events(t, body)
	for _, p := range [][2]string{{rec[0], got[0]}, {rec[len(rec)-2], got[len(got)-2]}} {
		if w, g := keyPaths(t, strings.TrimPrefix(p[0], "data: ")), keyPaths(t, strings.TrimPrefix(p[1], "data: ")); !slices.Equal(w, g) {
			t.Errorf("keys:\n got %v\nvLLM %v", g, w)
		}
	}
}

func TestNonStreaming(t *testing.T) {
	h := start(t, Config{Seed: 11, NaturalLength: 5})
	status, body, resp := h.post("/v1/chat/completions", `{`+chatMsgs+`}`, "X-Request-Id", "ns1")
	if status != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content-type %q: %s", status, resp.Header.Get("Content-Type"), body)
	}
	if resp.ContentLength != int64(len(body)) {
		t.Errorf("Content-Length %d, body %d bytes", resp.ContentLength, len(body))
	}
	want := `{"id":"chatcmpl-ns1","object":"chat.completion","created":` + created(t, body) + `,"model":"sim-llama","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		OutputText(11, 5) + `","refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning_content":null},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":` +
		strconv.Itoa(chatISL) + `,"total_tokens":` + strconv.Itoa(chatISL+5) + `,"completion_tokens":5,"prompt_tokens_details":null},"prompt_logprobs":null,"kv_transfer_params":null}`
	if body != want {
		t.Fatalf("chat body\n got: %s\nwant: %s", body, want)
	}
	tr := h.waitTrace("ns1")
	if tr.Stream || len(tr.Events) != 1 || tr.Events[0].Kind != EventBody || tr.CompletionTokens != 5 {
		t.Errorf("trace = %+v", tr)
	}

	status, body, _ = h.post("/v1/completions", `{"prompt":[1,2,3,4],"max_tokens":2}`, "X-Request-Id", "ns2")
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	want = `{"id":"cmpl-ns2","object":"text_completion","created":` + created(t, body) + `,"model":"sim-llama","choices":[{"index":0,"text":"` + OutputText(11, 2) +
		`","logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_logprobs":null}],"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":4,"total_tokens":6,"completion_tokens":2,"prompt_tokens_details":null},"kv_transfer_params":null}`
	if body != want {
		t.Fatalf("completions body\n got: %s\nwant: %s", body, want)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
}

// usageOf sends a non-streaming request and returns its usage and finish reason.
func usageOf(t *testing.T, h *harness, path, body string) (prompt, completion int, finish string) {
	t.Helper()
	status, b, _ := h.post(path, body)
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	var r struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(b), &r); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if r.Usage.TotalTokens != r.Usage.PromptTokens+r.Usage.CompletionTokens {
		t.Errorf("total_tokens %d != %d + %d", r.Usage.TotalTokens, r.Usage.PromptTokens, r.Usage.CompletionTokens)
	}
	return r.Usage.PromptTokens, r.Usage.CompletionTokens, r.Choices[0].FinishReason
}

func TestTokenLimits(t *testing.T) {
	h := start(t, Config{NaturalLength: 5, DefaultMaxTokens: 7})
	cases := []struct {
		body   string
		n      int
		finish string
	}{
		{`{` + chatMsgs + `,"max_tokens":10}`, 5, "stop"},
		{`{` + chatMsgs + `,"max_tokens":5}`, 5, "stop"},
		{`{` + chatMsgs + `,"max_tokens":3}`, 3, "length"},
		{`{` + chatMsgs + `,"max_tokens":10,"ignore_eos":true}`, 10, "length"},
		{`{` + chatMsgs + `,"max_tokens":50,"max_completion_tokens":2}`, 2, "length"},
		{`{` + chatMsgs + `,"max_tokens":null,"max_completion_tokens":null,"ignore_eos":true}`, 7, "length"},
		{`{` + chatMsgs + `}`, 5, "stop"},
	}
	for _, c := range cases {
		_, n, finish := usageOf(t, h, "/v1/chat/completions", c.body)
		if n != c.n || finish != c.finish {
			t.Errorf("%s: %d tokens %q, want %d %q", c.body, n, finish, c.n, c.finish)
		}
	}
	// Completions ignore max_completion_tokens, as vLLM's completions API.
	if _, n, _ := usageOf(t, h, "/v1/completions", `{"prompt":"x","max_completion_tokens":2,"ignore_eos":true}`); n != 7 {
		t.Errorf("completions with max_completion_tokens: %d tokens, want the default 7", n)
	}

	// Zero config: no natural end, 256 tokens.
	h0 := start(t, Config{})
	if _, n, finish := usageOf(t, h0, "/v1/chat/completions", `{`+chatMsgs+`}`); n != 256 || finish != "length" {
		t.Errorf("zero config: %d %q, want 256 length", n, finish)
	}
}

func TestPromptTokens(t *testing.T) {
	h := start(t, Config{})
	cases := []struct {
		path, body string
		want       int
	}{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"one two  three\n four"}],"max_tokens":1}`, ChatPromptTokens("one two  three\n four")},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":"a b"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"c"}]},{"role":"assistant","content":null}],"max_tokens":1}`, ChatPromptTokens("a b c", "")},
		{"/v1/chat/completions", `{"messages":[],"max_tokens":1}`, 0},
		{"/v1/completions", `{"prompt":"alpha beta gamma","max_tokens":1}`, CompletionPromptTokens("alpha beta gamma")},
		{"/v1/completions", `{"prompt":["alpha beta"],"max_tokens":1}`, CompletionPromptTokens("alpha beta")},
		{"/v1/completions", `{"prompt":[[5,6,7]],"max_tokens":1}`, 3},
	}
	for _, c := range cases {
		if p, _, _ := usageOf(t, h, c.path, c.body); p != c.want {
			t.Errorf("%s: prompt_tokens %d, want %d", c.body, p, c.want)
		}
	}
	if got := ChatPromptTokens("You are terse.", "Say three words please"); got != 2*MessageOverheadTokens+3+4 {
		t.Errorf("ChatPromptTokens = %d", got)
	}
	if got := CompletionPromptTokens("a b c"); got != 4 {
		t.Errorf("CompletionPromptTokens = %d, want 4", got)
	}
}

func TestWords(t *testing.T) {
	for _, s := range []string{"", " ", "a", " a ", "a  b\tc\nd", "héllo wörld", "a\u00a0b\u2003c", "x\u0085y", "\xff\xfe a"} {
		if got, want := Words(s), len(strings.Fields(s)); got != want {
			t.Errorf("Words(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestTokenText(t *testing.T) {
	if TokenText(1, 1) == "" || strings.HasPrefix(TokenText(1, 1), " ") {
		t.Errorf("token 1 = %q: want a word without leading space", TokenText(1, 1))
	}
	for i := 2; i < 50; i++ {
		if w := TokenText(1, i); !strings.HasPrefix(w, " ") || len(w) < 2 {
			t.Errorf("token %d = %q: want a space then a word", i, w)
		}
	}
	if OutputText(1, 20) == OutputText(2, 20) {
		t.Error("different seeds gave the same text")
	}
	if OutputText(5, 30) != OutputText(5, 30) {
		t.Error("output is not deterministic")
	}
	for _, w := range vocabulary {
		if b, _ := json.Marshal(w); string(b) != `"`+w+`"` {
			t.Errorf("vocabulary word %q needs escaping", w)
		}
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "nl\n\r\t", "ctl\x01\x1f", "ünïcode ✓", "bad\xffutf8"} {
		got := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Errorf("%q: invalid JSON %s: %v", s, got, err)
			continue
		}
		want := strings.ToValidUTF8(s, "\ufffd")
		if back != want {
			t.Errorf("%q: round trip gave %q", s, back)
		}
	}
}

func TestModelsAndRoutes(t *testing.T) {
	h := start(t, Config{Model: "org/model-7b"})
	resp := h.do("GET", "/v1/models", "")
	var models struct {
		Object string
		Data   []struct {
			ID, Object string
			OwnedBy    string `json:"owned_by"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || models.Object != "list" || len(models.Data) != 1 || models.Data[0].ID != "org/model-7b" || models.Data[0].Object != "model" {
		t.Errorf("models: %d %+v", resp.StatusCode, models)
	}
	var ctxLen struct {
		Data []struct {
			MaxModelLen int `json:"max_model_len"`
		}
	}
	resp = h.do("GET", "/v1/models", "")
	if err := json.NewDecoder(resp.Body).Decode(&ctxLen); err != nil || len(ctxLen.Data) != 1 || ctxLen.Data[0].MaxModelLen != 131072 {
		t.Errorf("models: max_model_len %+v, %v; want 131072", ctxLen, err)
	}
	resp.Body.Close()
	if h.s.Model() != "org/model-7b" {
		t.Errorf("Model() = %q", h.s.Model())
	}

	resp = h.do("GET", "/health", "")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("health: %d", resp.StatusCode)
	}

	errCases := []struct {
		method, path, body string
		status             int
		typ, msg           string
	}{
		{"POST", "/v1/nope", `{}`, 404, "NotFoundError", "no route"},
		{"GET", "/v1/chat/completions", "", 405, "MethodNotAllowedError", "not allowed"},
		{"POST", "/v1/models", `{}`, 405, "MethodNotAllowedError", "not allowed"},
		{"POST", "/v1/chat/completions", `{"messages":[`, 400, "BadRequestError", "not valid JSON"},
		{"POST", "/v1/chat/completions", `[1]`, 400, "BadRequestError", "JSON object"},
		{"POST", "/v1/chat/completions", `{"model":"other",` + chatMsgs + `}`, 404, "NotFoundError", "The model `other` does not exist."},
		{"POST", "/v1/chat/completions", `{` + chatMsgs + `,"stream_options":{"include_usage":true}}`, 400, "BadRequestError", "stream=True"},
		{"POST", "/v1/chat/completions", `{` + chatMsgs + `,"max_tokens":0}`, 400, "BadRequestError", "at least 1"},
		{"POST", "/v1/chat/completions", `{` + chatMsgs + `,"max_tokens":1.5}`, 400, "BadRequestError", "integer"},
		{"POST", "/v1/chat/completions", `{` + chatMsgs + `,"stream":"yes"}`, 400, "BadRequestError", "boolean"},
		{"POST", "/v1/chat/completions", `{` + chatMsgs + `,"n":2}`, 400, "BadRequestError", "n=1"},
		{"POST", "/v1/chat/completions", `{"prompt":"x"}`, 400, "BadRequestError", "messages"},
		{"POST", "/v1/completions", `{"messages":[]}`, 400, "BadRequestError", "prompt"},
		{"POST", "/v1/completions", `{"prompt":["a","b"]}`, 400, "BadRequestError", "one prompt"},
		// An output limit past the model's context is refused, as vLLM
		// refuses it: built whole, a non-streamed answer of 10^11 tokens
		// ran the simulator (and serve, which runs it in its process) out
		// of memory (a new user's probe).
		{"POST", "/v1/chat/completions", `{` + chatMsgs + `,"max_tokens":100000000000}`, 400, "BadRequestError", "maximum context length is 131072 tokens"},
		{"POST", "/v1/chat/completions", `{` + chatMsgs + `,"stream":true,"max_tokens":131072}`, 400, "BadRequestError", "maximum context length"},
		{"POST", "/v1/completions", `{"prompt":"x","max_tokens":9223372036854775807}`, 400, "BadRequestError", "maximum context length"},
		{"POST", "/v1/responses", `{"input":"x","max_output_tokens":1000000}`, 400, "BadRequestError", "maximum context length"},
	}
	for _, c := range errCases {
		resp := h.do(c.method, c.path, c.body)
		var e struct {
			Error struct {
				Message, Type string
				Param         *string
				Code          int
			}
		}
		err := json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if err != nil {
			t.Errorf("%s %s %s: body is not JSON: %v", c.method, c.path, c.body, err)
			continue
		}
		if resp.StatusCode != c.status || e.Error.Code != c.status || e.Error.Type != c.typ || e.Error.Param != nil ||
			!strings.Contains(e.Error.Message, c.msg) || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s %s: %d %+v, want %d %s containing %q", c.method, c.path, c.body, resp.StatusCode, e.Error, c.status, c.typ, c.msg)
		}
	}
}

func TestRejectedRequestsAreTraced(t *testing.T) {
	h := start(t, Config{})
	status, _, _ := h.post("/v1/chat/completions", `{bad`, "X-Request-Id", "bad-1")
	if status != 400 {
		t.Fatalf("status %d", status)
	}
	tr := h.waitTrace("bad-1")
	if tr.Status != 400 || !tr.Done || len(tr.Events) != 1 || tr.Events[0].Kind != EventBody || tr.Path != "/v1/chat/completions" {
		t.Errorf("trace = %+v", tr)
	}
}

func TestGeneratedRequestID(t *testing.T) {
	h := start(t, Config{})
	_, body, resp := h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":1,"stream":true}`)
	id := resp.Header.Get("X-Request-Id")
	if ok, _ := regexp.MatchString(`^[0-9a-f]{32}$`, id); !ok {
		t.Fatalf("generated id %q: want 32 hex digits", id)
	}
	if !strings.Contains(body, `"id":"chatcmpl-`+id+`"`) {
		t.Errorf("chunk id does not use the request id %s: %s", id, body)
	}
	if _, ok := h.s.Trace(id); !ok {
		t.Errorf("no trace under the generated id")
	}
	_, _, resp2 := h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":1}`)
	if resp2.Header.Get("X-Request-Id") == id {
		t.Error("two requests got the same generated id")
	}
}
