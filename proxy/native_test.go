package proxy

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fastjson"
)

// The engines' native APIs are metered: Ollama's /api/chat and
// /api/generate (NDJSON, application/x-ndjson; a request without "stream"
// streams; stream:false answers one JSON object) and llama.cpp server's
// /completion (SSE without [DONE]; its /completions serves the same and is
// read alike). The client gets the engine's bytes untouched; the record
// has the route, the engine's counts (Ollama's prompt_eval_count and
// eval_count, llama.cpp's tokens_evaluated and tokens_predicted) and its
// token events. An Ollama stream cut before its done line is an
// upstream_error.
func TestNativeAPIsMetered(t *testing.T) {
	streams := map[string]string{
		"/api/chat":     fixtureText(t, "ollama/lcgo-api-chat-stream-gemma3.ndjson"),
		"/api/generate": fixtureText(t, "ollama/oll-api-generate-stream-llama3-2024.ndjson"),
		"/completion":   fixtureText(t, "llamacpp/llamacpp-src-completion-stream-native.txt"),
		"/completions":  fixtureText(t, "llamacpp/llamacpp-src-completion-stream-native.txt"),
		// llama.cpp answers /infill (fill-in-the-middle) as /completion,
		// in its native shape.
		"/infill": fixtureText(t, "llamacpp/llamacpp-src-completion-stream-native.txt"),
	}
	const ollamaBody = `{"model":"gemma3:1b","created_at":"2025-08-20T13:48:24Z","message":{"role":"assistant","content":"Okay, here is a count."},"done_reason":"stop","done":true,"total_duration":171946792,"prompt_eval_count":16,"eval_count":22}`
	up := startRawUpstream(t, func(c *scriptConn) {
		path := string(c.Req.URI().Path())
		body := string(c.Req.Body())
		switch {
		case strings.Contains(body, `"stream":false`):
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s", len(ollamaBody), ollamaBody)
			c.BW.Flush()
			return
		case strings.HasPrefix(path, "/api/"):
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n")
			c.BW.Flush()
		default:
			writeSSEHead(c)
		}
		writeChunk(c, streams[path])
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, c := range []struct {
		path, body string
		route      string
		stream     bool
		events     int
		isl, osl   int
		outcome    meter.Outcome
		want       string // what the client gets
	}{
		{"/api/chat", `{"model":"gemma3:1b","messages":[{"role":"user","content":"count"}]}`, "ollama_chat", true, 21, 16, 22, meter.OutcomeOK, streams["/api/chat"]},
		{"/api/generate", `{"model":"llama3","prompt":"a joke","stream":true}`, "ollama_generate", true, 70, 17, 71, meter.OutcomeOK, streams["/api/generate"]},
		{"/api/chat", `{"model":"gemma3:1b","stream":false,"messages":[{"role":"user","content":"count"}]}`, "ollama_chat", false, meter.Unknown, 16, 22, meter.OutcomeOK, ollamaBody},
		{"/completion", `{"prompt":"The capital of France is","stream":true,"return_progress":true}`, "llamacpp_completion", true, 6, 12, 6, meter.OutcomeOK, streams["/completion"]},
		{"/completions", `{"prompt":"The capital of France is","stream":true,"stream_options":{"include_usage":true}}`, "completions", true, 6, 12, 6, meter.OutcomeOK, streams["/completions"]},
		{"/infill", `{"input_prefix":"def capital(","input_suffix":"):\n","prompt":"","stream":true}`, "llamacpp_completion", true, 6, 12, 6, meter.OutcomeOK, streams["/infill"]},
	} {
		checkMeteredPost(t, g, meteredPost{c.path, c.body, c.route, c.stream, c.events, c.isl, c.osl, c.outcome, c.want})
	}
}

// A llama.cpp stream of a request with response_fields has its last event
// cut to the members named, "stop" among them or not: it ends the stream
// all the same (outcome ok, not a stream cut short), the client gets it
// untouched, and the counts are the running ones of the events before.
func TestLlamaCppResponseFieldsStream(t *testing.T) {
	full := fixtureText(t, "llamacpp/llamacpp-src-completion-stream-native.txt")
	cut := strings.TrimSuffix(full, "\n\n")
	stream := full[:strings.LastIndex(cut, "\n\n")+2] + `data: {"content":""}` + "\n\n"
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, stream)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, path := range []string{"/completion", "/completions"} {
		status, _, got, err := post(t, g.URL()+path, `{"prompt":"The capital of France is","stream":true,"response_fields":["content"]}`, nil)
		if err != nil || status != 200 || got != stream {
			t.Fatalf("%s: status %d err %v, the client got %q", path, status, err, got)
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeOK || rec.ErrorMessage != "" || rec.Events != 6 || rec.ISL != 12 || rec.OSL != 6 || rec.UsageSource != meter.UsageContinuous {
			t.Errorf("%s: outcome %v (%s) events %d isl %d osl %d (%v); want ok, 6 12 6 (continuous_usage)",
				path, rec.Outcome, rec.ErrorMessage, rec.Events, rec.ISL, rec.OSL, rec.UsageSource)
		}
	}
}

// An Ollama stream that ends before its done line was cut short, however
// cleanly the connection ended.
func TestOllamaStreamCutShort(t *testing.T) {
	s := strings.TrimSuffix(fixtureText(t, "ollama/lcgo-api-chat-stream-gemma3.ndjson"), "\n")
	cut := s[:strings.LastIndex(s, "\n")+1] // every line but the done line
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n")
		writeChunk(c, cut)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	if status, _, got, err := post(t, g.URL()+"/api/chat", `{"model":"gemma3:1b","messages":[]}`, nil); err != nil || status != 200 || got != cut {
		t.Fatalf("status %d err %v", status, err)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeUpstreamError || rec.ErrorMessage != errNoFinalEvent || rec.Events != 21 || rec.OSL != 21 || rec.UsageSource != meter.UsageEstimate {
		t.Errorf("outcome %v %q events %d osl %d (%v)", rec.Outcome, rec.ErrorMessage, rec.Events, rec.OSL, rec.UsageSource)
	}
}

func TestNativeRequest(t *testing.T) {
	var p fastjson.Parser
	for _, c := range []struct {
		api       meter.API
		body      string
		stream    bool
		maxTokens int
		dflt      bool // an engine that may answer reads no limit: its default
	}{
		{meter.APIOllamaChat, `{"model":"m","messages":[]}`, true, 0, true},
		{meter.APIOllamaChat, `{"model":"m","stream":null,"options":{"num_predict":64}}`, true, 64, true}, // llama.cpp's /api/chat reads no options
		{meter.APIOllamaGenerate, `{"model":"m","stream":false,"options":{"num_predict":-1}}`, false, 0, true},
		{meter.APILlamaCpp, `{"prompt":"x","stream":true,"n_predict":32}`, true, 32, false},
		// Ollama reads no max_tokens (Go's json drops unknown members): an
		// output limit there is none, and the default is charged; on
		// /api/chat, llama.cpp's server reads its names (n_predict,
		// max_completion_tokens, max_tokens), and the larger counts.
		{meter.APIOllamaChat, `{"model":"m","max_tokens":1,"max_completion_tokens":1,"messages":[]}`, true, 1, true},
		{meter.APIOllamaChat, `{"model":"m","n_predict":4000,"options":{"num_predict":1},"messages":[]}`, true, 4000, false},
		{meter.APIOllamaChat, `{"model":"m","n_predict":40,"options":{"num_predict":60},"messages":[]}`, true, 60, false},
		{meter.APIOllamaGenerate, `{"model":"m","max_tokens":1,"options":{"num_predict":64}}`, true, 64, false},
		// llama.cpp reads n_predict first, then max_completion_tokens, then
		// max_tokens: n_predict -1 (no limit) is no limit, whatever follows.
		{meter.APILlamaCpp, `{"prompt":"x","n_predict":-1,"max_tokens":5}`, false, 0, true},
		{meter.APILlamaCpp, `{"prompt":"x","max_tokens":5}`, false, 5, false},
		{meter.APILlamaCpp, `{"prompt":"x","n_predict":null,"max_completion_tokens":7,"max_tokens":5}`, false, 7, false},
		{meter.APILlamaCpp, `{"prompt":"x","max_completion_tokens":0,"max_tokens":5}`, false, 0, true},
		{meter.APILlamaCpp, `{"prompt":"x","max_output_tokens":5}`, false, 0, true},
		{meter.APIChat, `{"model":"m","messages":[]}`, false, 0, true},
	} {
		ri, v := parseRequest(&p, []byte(c.body))
		nativeRequest(c.api, v, &ri)
		if ri.stream != c.stream || ri.maxTokens != c.maxTokens || ri.someDefault != c.dflt {
			t.Errorf("%v %s: stream %v max tokens %d default %v, want %v %d %v", c.api, c.body, ri.stream, ri.maxTokens, ri.someDefault, c.stream, c.maxTokens, c.dflt)
		}
	}
}

// A stream cut under on_overrun: cut ends with an error in its API's shape:
// on Ollama's routes one JSON line {"error":"..."}, which Ollama's clients
// raise (an SSE event there would be a malformed line).
func TestOverrunEventShape(t *testing.T) {
	var p fastjson.Parser
	for _, api := range []meter.API{meter.APIOllamaChat, meter.APIOllamaGenerate} {
		ev := overrunEventFor(api)
		if strings.Count(string(ev), "\n") != 1 || !strings.HasSuffix(string(ev), "\n") {
			t.Fatalf("%v: %q is not one line", api, ev)
		}
		v, err := p.ParseBytes(ev)
		if err != nil || len(v.GetStringBytes("error")) == 0 {
			t.Fatalf("%v: %q: %v", api, ev, err)
		}
	}
	for _, api := range []meter.API{meter.APIChat, meter.APICompletions, meter.APIResponses, meter.APILlamaCpp} {
		if string(overrunEventFor(api)) != string(overrunEvent) {
			t.Errorf("%v: %q", api, overrunEventFor(api))
		}
	}
	// TGI's: its own error event, which the meter reads as one
	var sf meter.SSEFramer
	var sp meter.StreamParser
	var ev meter.Event
	var info meter.EventInfo
	sf.Feed(overrunEventFor(meter.APITGI))
	if ok, err := sf.Next(&ev); !ok || err != nil || sp.Parse(meter.APITGI, &ev, &info) != nil || !info.Error || !strings.HasPrefix(string(info.ErrorMessage), "Rate limit reached") {
		t.Errorf("tgi: %q: %+v", overrunEventFor(meter.APITGI), info)
	}
	if string(overrunEventFor(meter.APIMessages)) != string(overrunEventMessages) {
		t.Errorf("messages: %q", overrunEventFor(meter.APIMessages))
	}
}

// llama.cpp's server answers POST /api/chat too (an alias of its
// /v1/chat/completions, for Ollama's clients), in OpenAI's chat shape: an
// event stream of chat chunks (text/event-stream, [DONE]) or, without
// "stream" (its default is false), one chat.completion object. Through the
// gateway that route is ollama_chat; its answer is metered as what it is,
// not refused as malformed Ollama lines.
func TestOllamaChatRouteAnsweredInOpenAIShape(t *testing.T) {
	stream := fixtureText(t, "llamacpp/fantasy-llamacpp-b7010-chat-stream-usage-timings.txt")
	const body = `{"choices":[{"finish_reason":"stop","index":0,"message":{"role":"assistant","content":"Olá!"}}],"created":1762855699,"model":"openai/gpt-oss-20b","system_fingerprint":"b7010-c27efd2bd","object":"chat.completion","usage":{"completion_tokens":57,"prompt_tokens":84,"total_tokens":141},"id":"chatcmpl-rd0JN5fzYlCrafuJEy6psZhukXbBVmTK"}`
	up := startRawUpstream(t, func(c *scriptConn) {
		if !strings.Contains(string(c.Req.Body()), `"stream":true`) {
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			c.BW.Flush()
			return
		}
		writeSSEHead(c)
		writeChunk(c, stream)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, c := range []struct {
		req    string
		want   string
		stream bool
		events int
	}{
		// The fixture: a role chunk, 47 reasoning and content chunks, the
		// finish chunk (49 token events), the usage chunk, [DONE].
		{`{"model":"gpt-oss-20b","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, stream, true, 49},
		{`{"model":"gpt-oss-20b","messages":[{"role":"user","content":"hi"}]}`, body, false, meter.Unknown},
	} {
		status, _, got, err := post(t, g.URL()+"/api/chat", c.req, nil)
		if err != nil || status != 200 || got != c.want {
			t.Fatalf("%s: status %d err %v, body intact %v", c.req, status, err, got == c.want)
		}
		rec := g.record(t)
		if rec.Route != "ollama_chat" || rec.Outcome != meter.OutcomeOK || rec.Stream != c.stream || rec.Events != c.events ||
			rec.ISL != 84 || rec.OSL != 57 || rec.UsageSource != meter.UsageUpstream {
			t.Errorf("%s: route %q outcome %v (%s) stream %v events %d isl %d osl %d (%v); want ollama_chat ok %v %d 84 57 (usage)",
				c.req, rec.Route, rec.Outcome, rec.ErrorMessage, rec.Stream, rec.Events, rec.ISL, rec.OSL, rec.UsageSource, c.stream, c.events)
		}
	}
}

// Ollama reads its request with Go's encoding/json, which takes a member
// for a field whatever its case (and under Unicode's simple folding: "ſ"
// is "s"), the last one winning; the gateway reads members as written. A
// body on Ollama's routes whose members Ollama would read otherwise than
// the gateway (a "MODEL" after "model": a cheap model charged, another
// run; a "Model" alone: no model for the per-model limits) is refused as a
// duplicate is, before the engine sees it. So on the OpenAI-shaped routes
// Ollama serves too (chat, completions, the Responses and Messages APIs),
// which its middleware reads with the same encoding/json: a "MAX_TOKENS":
// 100000 there, read by Ollama as its limit and by the gateway as no limit
// at all, was charged the default.
func TestOllamaFoldedMembersRejected(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		const body = `{"model":"m","message":{"role":"assistant","content":"x"},"done":true,"done_reason":"stop","eval_count":1}`
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		c.BW.Flush()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, c := range []struct{ path, body, key string }{
		{"/api/chat", `{"model":"cheap","MODEL":"llama-70b","messages":[]}`, `"MODEL"`},
		{"/api/chat", `{"Model":"llama-70b","messages":[]}`, `"Model"`},
		{"/api/generate", `{"model":"m","prompt":"x","ſtream":false}`, `"ſtream"`},
		{"/api/generate", `{"model":"m","prompt":"x","options":{"num_predict":1},"Options":{"num_predict":100000}}`, `"Options"`},
		{"/api/chat", `{"model":"m","messages":[],"Foo":1,"foo":2}`, `"foo"`},
		{"/api/chat", `{"model":"m","messages":[],"options":{"num_predict":1,"num_predict":100000}}`, `"options.num_predict"`},
		{"/v1/chat/completions", `{"model":"m","messages":[],"MAX_TOKENS":100000}`, `"MAX_TOKENS"`},
		{"/v1/chat/completions", `{"model":"m","messages":[],"max_tokens":1,"Max_Tokens":100000}`, `"Max_Tokens"`},
		{"/v1/chat/completions", `{"model":"cheap","MODEL":"llama-70b","messages":[]}`, `"MODEL"`},
		{"/v1/completions", `{"model":"m","prompt":"x","max_toKens":100000}`, `"max_toKens"`}, // the Kelvin sign folds to k
		{"/v1/responses", `{"model":"m","input":"x","Max_Output_Tokens":100000}`, `"Max_Output_Tokens"`},
		{"/v1/messages", `{"model":"m","messages":[],"max_tokens":1,"MAX_TOKENS":100000}`, `"MAX_TOKENS"`},
	} {
		status, _, resp, err := post(t, g.URL()+c.path, c.body, nil)
		if err != nil || status != 400 || !strings.Contains(resp, strings.ReplaceAll(c.key, `"`, `\"`)) {
			t.Fatalf("%s %s: status %d body %s err %v", c.path, c.body, status, resp, err)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || rec.Status != 400 {
			t.Fatalf("%s: outcome %v status %d", c.body, rec.Outcome, rec.Status)
		}
	}
	if n := up.accepts.Load(); n != 0 {
		t.Fatalf("the engine was contacted %d times", n)
	}
	// Names Ollama reads as the gateway does pass, and so does a folded
	// name on a route Ollama does not serve (vLLM's chat batch).
	for _, c := range []struct{ path, body string }{
		{"/api/chat", `{"model":"m","stream":false,"messages":[{"role":"user","content":"a","Role":"x"}],"options":{"num_predict":4}}`},
		{"/v1/chat/completions", `{"model":"m","messages":[],"max_tokens":4}`},
		{"/v1/chat/completions/batch", `{"model":"m","MODEL":"x","messages":[]}`},
	} {
		if status, _, _, err := post(t, g.URL()+c.path, c.body, nil); err != nil || status != 200 {
			t.Fatalf("%s %s: status %d err %v", c.path, c.body, status, err)
		}
		g.record(t)
	}
}

// foldDupIn finds the same names as a comparison of every pair with
// bytes.EqualFold (Go's encoding/json's rule), in small objects and in
// large ones (compared by fold).
func TestFoldDupIn(t *testing.T) {
	var p fastjson.Parser
	for _, extra := range []string{"", `"N5":0`, `"k\u212a":0,"kk":1`, `"ſ":0,"S":1`, `"é":0,"É":1`, `"ß":0,"ẞ":1`, `"σ":0,"ς":1`, `"a":0,"b":1`} {
		for _, n := range []int{3, 70} {
			var b strings.Builder
			b.WriteString("{")
			for i := range n {
				fmt.Fprintf(&b, `"n%d":0,`, i)
			}
			b.WriteString(extra)
			body := strings.TrimSuffix(b.String(), ",") + "}"
			v, err := p.Parse(body)
			if err != nil {
				t.Fatal(err)
			}
			o, _ := v.Object()
			want := ""
			var names [][]byte
			o.Visit(func(k []byte, _ *fastjson.Value) { names = append(names, append([]byte(nil), k...)) })
			for i := range names {
				for j := range i {
					if want == "" && bytes.EqualFold(names[i], names[j]) {
						want = string(names[i])
					}
				}
			}
			if got := foldDupIn(o); got != want {
				t.Errorf("%d members and %s: %q, want %q", n, extra, got, want)
			}
		}
	}
}

// llama.cpp's /v1/completions with several prompts and stream:false: older
// builds answered a JSON array of text_completion objects, one per prompt
// with its own usage: a success, metered as the sum of their counts, not a
// malformed body. Current builds answer one object
// (server_routes::handle_completions_impl: the first task's
// to_json_oaicompat, every other task's choice appended to its choices),
// whose usage and timings are the first task's alone: the first prompt's
// count and the first choice's output. The record keeps of it only what
// is the whole answer's: nothing for several prompts; for one prompt with
// n choices (chat too), that prompt's count, the output count unknown. The
// client gets the engine's bytes untouched.
func TestLlamaCppSeveralPromptsOpenAIBody(t *testing.T) {
	const array = `[{"choices":[{"text":" Paris.","index":0,"logprobs":null,"finish_reason":"stop"}],"created":1,"model":"m","system_fingerprint":"b7010","object":"text_completion","id":"chatcmpl-1","usage":{"completion_tokens":3,"prompt_tokens":6,"total_tokens":9}},` +
		`{"choices":[{"text":" Rome, of course.","index":1,"logprobs":null,"finish_reason":"length"}],"created":1,"model":"m","system_fingerprint":"b7010","object":"text_completion","id":"chatcmpl-1","usage":{"completion_tokens":5,"prompt_tokens":7,"total_tokens":12}}]`
	const timings = `"timings":{"cache_n":0,"prompt_n":6,"prompt_ms":20.1,"prompt_per_token_ms":3.3,"prompt_per_second":298.5,"predicted_n":3,"predicted_ms":40.2,"predicted_per_token_ms":13.4,"predicted_per_second":74.6}`
	const merged = `{"choices":[{"text":" Paris.","index":0,"logprobs":null,"finish_reason":"stop"},{"text":" Rome, of course.","index":1,"logprobs":null,"finish_reason":"length"}],` +
		`"created":1764000000,"model":"m","system_fingerprint":"b7300-0a1b2c3d","object":"text_completion","usage":{"completion_tokens":3,"prompt_tokens":6,"total_tokens":9},"id":"chatcmpl-x",` + timings + `}`
	const mergedN2 = `{"choices":[{"text":" Paris.","index":0,"logprobs":null,"finish_reason":"stop"},{"text":" Lyon.","index":1,"logprobs":null,"finish_reason":"stop"}],` +
		`"created":1764000000,"model":"m","system_fingerprint":"b7300-0a1b2c3d","object":"text_completion","usage":{"completion_tokens":3,"prompt_tokens":6,"total_tokens":9},"id":"chatcmpl-x",` + timings + `}`
	const chatN2 = `{"choices":[{"finish_reason":"stop","index":0,"message":{"role":"assistant","content":"Hi"}},{"finish_reason":"stop","index":1,"message":{"role":"assistant","content":"Hello there"}}],` +
		`"created":1764000000,"model":"m","system_fingerprint":"b7300-0a1b2c3d","object":"chat.completion","usage":{"completion_tokens":3,"prompt_tokens":6,"total_tokens":9},"id":"chatcmpl-x",` + timings + `}`
	var body string
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		c.BW.Flush()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	const twoPrompts = `{"model":"m","prompt":["The capital of France is","The capital of Italy is"],"max_tokens":5}`
	for _, c := range []struct {
		name, path, req, body string
		isl, osl              int
		source                meter.UsageSource
	}{
		{"an array", "/v1/completions", twoPrompts, array, 13, 8, meter.UsageUpstream},
		{"two prompts", "/v1/completions", twoPrompts, merged, meter.Unknown, meter.Unknown, meter.UsageNone},
		{"one prompt, n 2", "/v1/completions", `{"model":"m","prompt":"The capital of France is","n":2,"max_tokens":5}`, mergedN2, 6, meter.Unknown, meter.UsageUpstream},
		{"chat, n 2", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"n":2}`, chatN2, 6, meter.Unknown, meter.UsageUpstream},
	} {
		body = c.body
		status, _, got, err := post(t, g.URL()+c.path, c.req, nil)
		if err != nil || status != 200 || got != c.body {
			t.Fatalf("%s: status %d err %v", c.name, status, err)
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeOK || rec.ISL != c.isl || rec.OSL != c.osl || rec.UsageSource != c.source {
			t.Errorf("%s: outcome %v (%s) isl %d osl %d (%v); want ok %d %d (%v)", c.name, rec.Outcome, rec.ErrorMessage, rec.ISL, rec.OSL, rec.UsageSource, c.isl, c.osl, c.source)
		}
	}
}

// llama.cpp's /completion with several prompts (or n_cmpl) and stream:false
// answers a JSON array of its results, one object per prompt ("if single
// request, return single object instead of array"): a success, metered as
// the sum of their counts, not a malformed body.
func TestLlamaCppSeveralPromptsBody(t *testing.T) {
	const body = `[{"index":0,"content":" Paris.","tokens":[],"id_slot":0,"stop":true,"model":"m","tokens_predicted":3,"tokens_evaluated":6,"stop_type":"eos","stopping_word":"","tokens_cached":8,"truncated":false},` +
		`{"index":1,"content":" Rome, of course.","tokens":[],"id_slot":1,"stop":true,"model":"m","tokens_predicted":5,"tokens_evaluated":7,"stop_type":"limit","stopping_word":"","tokens_cached":11,"truncated":false}]`
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		c.BW.Flush()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, path := range []string{"/completion", "/completions"} {
		status, _, got, err := post(t, g.URL()+path, `{"prompt":["The capital of France is","The capital of Italy is"],"n_predict":5}`, nil)
		if err != nil || status != 200 || got != body {
			t.Fatalf("%s: status %d err %v", path, status, err)
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeOK || rec.ISL != 13 || rec.OSL != 8 || rec.UsageSource != meter.UsageUpstream {
			t.Errorf("%s: outcome %v (%s) isl %d osl %d (%v); want ok 13 8 (usage)", path, rec.Outcome, rec.ErrorMessage, rec.ISL, rec.OSL, rec.UsageSource)
		}
	}
}

// llama.cpp's /v1/completions streamed with several prompts, and n choices
// each, puts each choice's usage on its finish chunk (the chunk of
// server_task_result_cmpl_final::to_json_oaicompat; choices numbered one
// prompt's after the other, server_response_reader::post_tasks), and no
// usage-only chunk. The record sums them: the output counts, each prompt's
// count once (the request's n_cmpl, else n, says how many choices a prompt
// has). The client gets the engine's bytes untouched: no usage is
// removed, none being a usage-only chunk; a body large enough to be parsed
// shallow is read alike.
func TestLlamaCppSeveralPromptsStream(t *testing.T) {
	chunk := func(i, text, finish, usage string) string {
		return `data: {"choices":[{"text":"` + text + `","index":` + i + `,"logprobs":null,"finish_reason":` + finish + `}],"created":1764000000,"model":"m","system_fingerprint":"b7300-0a1b2c3d","object":"text_completion"` +
			usage + `,"id":"chatcmpl-x"}` + "\n\n"
	}
	usage := func(p, c int) string {
		return fmt.Sprintf(`,"usage":{"completion_tokens":%d,"prompt_tokens":%d,"total_tokens":%d}`, c, p, p+c)
	}
	// Two prompts of 6 and 7 tokens; with n 2, choices 0 and 1 are the
	// first's, 2 and 3 the second's.
	twoPrompts := chunk("0", " Paris", "null", "") + chunk("1", " Rome", "null", "") + chunk("1", ".", "null", "") +
		chunk("1", "", `"stop"`, usage(7, 2)) + chunk("0", ".", "null", "") + chunk("0", "", `"stop"`, usage(6, 2)) + "data: [DONE]\n\n"
	n2 := chunk("0", " a", "null", "") + chunk("2", " b", "null", "") + chunk("1", " c", "null", "") + chunk("3", " d", "null", "") +
		chunk("2", "", `"length"`, usage(7, 1)) + chunk("0", "", `"length"`, usage(6, 1)) + chunk("3", "", `"length"`, usage(7, 1)) + chunk("1", "", `"length"`, usage(6, 1)) + "data: [DONE]\n\n"
	var stream string
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, stream)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	long := strings.Repeat("word ", 20_000) // parsed shallow
	for _, c := range []struct {
		name, body, stream string
		isl, osl           int
	}{
		{"two prompts", `{"model":"m","stream":true,"prompt":["The capital of France is","The capital of Italy is"],"max_tokens":5}`, twoPrompts, 13, 4},
		{"two prompts, n 2", `{"model":"m","stream":true,"prompt":["The capital of France is","The capital of Italy is"],"n":2,"max_tokens":1}`, n2, 13, 4},
		{"two prompts, n_cmpl 2", `{"model":"m","stream":true,"prompt":["The capital of France is","The capital of Italy is"],"n_cmpl":2.0,"n":1,"max_tokens":1}`, n2, 13, 4},
		{"a long body, n 2", `{"model":"m","stream":true,"prompt":["` + long + `","The capital of Italy is"],"n":2,"max_tokens":1}`, n2, 13, 4},
	} {
		stream = c.stream
		status, _, got, err := post(t, g.URL()+"/v1/completions", c.body, nil)
		if err != nil || status != 200 || got != c.stream {
			t.Fatalf("%s: status %d err %v, the client got %q", c.name, status, err, got)
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeOK || rec.ISL != c.isl || rec.OSL != c.osl || rec.UsageSource != meter.UsageUpstream {
			t.Errorf("%s: outcome %v (%s) isl %d osl %d (%v); want ok %d %d (usage)", c.name, rec.Outcome, rec.ErrorMessage, rec.ISL, rec.OSL, rec.UsageSource, c.isl, c.osl)
		}
	}
}

// meteredPost is a POST whose answer must reach the client as the engine
// sent it (want) and leave an inference record of route, whole, with the
// engine's counts.
type meteredPost struct {
	path, body, route string
	stream            bool
	events, isl, osl  int
	outcome           meter.Outcome
	want              string
}

// checkMeteredPost sends c to g and checks the answer and its record.
func checkMeteredPost(t *testing.T, g *gateway, c meteredPost) {
	t.Helper()
	name := c.path + " " + c.body
	status, _, got, err := post(t, g.URL()+c.path, c.body, nil)
	if err != nil || status != 200 {
		t.Fatalf("%s: status %d err %v", name, status, err)
	}
	if got != c.want {
		t.Errorf("%s: the client got\n%q\nthe engine sent\n%q", name, got, c.want)
	}
	rec := g.record(t)
	if rec.Route != c.route || !rec.Inference() || rec.Stream != c.stream || rec.Outcome != c.outcome ||
		rec.Events != c.events || rec.ISL != c.isl || rec.OSL != c.osl || rec.UsageSource != meter.UsageUpstream {
		t.Errorf("%s: route %q stream %v outcome %v (%s) events %d isl %d osl %d (%v); want %q %v %v %d %d %d (usage)",
			name, rec.Route, rec.Stream, rec.Outcome, rec.ErrorMessage, rec.Events, rec.ISL, rec.OSL, rec.UsageSource,
			c.route, c.stream, c.outcome, c.events, c.isl, c.osl)
	}
	if c.stream && (rec.TTFT <= 0 || rec.E2E < rec.TTFT || len(rec.ITL) != c.events-1) {
		t.Errorf("%s: ttft %v e2e %v gaps %d", name, rec.TTFT, rec.E2E, len(rec.ITL))
	}
}

// Media types are case-insensitive (RFC 9110): an engine's
// "APPLICATION/JSON" body and "Application/X-NDJSON" stream are metered as
// their lower-case spellings are. llama.cpp's answer to /completion
// without a stream, under capitals, passed through unmetered, its counts
// unknown.
func TestMediaTypesInAnyCase(t *testing.T) {
	stream := fixtureText(t, "ollama/oll-api-generate-stream-llama3-2024.ndjson")
	const body = `{"index":0,"content":"Paris.","stop":true,"tokens_predicted":3,"tokens_evaluated":9}`
	up := startRawUpstream(t, func(c *scriptConn) {
		if strings.Contains(string(c.Req.Body()), `"stream":false`) {
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: APPLICATION/JSON; Charset=UTF-8\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			c.BW.Flush()
			return
		}
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: Application/X-NDJSON\r\nTransfer-Encoding: chunked\r\n\r\n")
		writeChunk(c, stream)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	checkMeteredPost(t, g, meteredPost{"/completion", `{"prompt":"The capital of France is","stream":false}`, "llamacpp_completion", false, meter.Unknown, 9, 3, meter.OutcomeOK, body})
	checkMeteredPost(t, g, meteredPost{"/api/generate", `{"model":"llama3","prompt":"a joke","stream":true}`, "ollama_generate", true, 70, 17, 71, meter.OutcomeOK, stream})
}

func TestHasMediaType(t *testing.T) {
	for _, c := range []struct {
		ct, mt string
		want   bool
	}{
		{"text/event-stream", "text/event-stream", true},
		{"Text/Event-Stream; charset=utf-8", "text/event-stream", true},
		{"application/json ;charset=utf-8", "application/json", true},
		{"application/json\t; x=y", "application/json", true},
		{"application/jsonl", "application/json", false}, // JSON Lines: not one JSON body
		{"application/json-seq", "application/json", false},
		{"application/problem+json", "application/json", false},
		{"text/event", "text/event-stream", false},
		{"", "text/html", false},
	} {
		if got := hasMediaType([]byte(c.ct), c.mt); got != c.want {
			t.Errorf("hasMediaType(%q, %q) = %v, want %v", c.ct, c.mt, got, c.want)
		}
	}
}
