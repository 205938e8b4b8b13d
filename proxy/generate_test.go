package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/valyala/fastjson"
)

// TGI's native routes (/generate_stream, /, /generate) and SGLang's
// (/generate) are metered: route, stream, TTFT, the engine's counts. They
// passed through as another route, charged their body's bytes/4 and never
// their output. The streams are the meter's fixtures built from the
// engines' sources (TGI's router/src/server.rs, SGLang's http_server.py and
// tokenizer manager); the bodies are their GenerateResponse and output
// dict.
func TestGenerateRoutesMetered(t *testing.T) {
	tgi := fixtureText(t, "tgi/tgi-src-generate-stream-details.txt")
	sgl := fixtureText(t, "sglang/sglang-src-generate-stream.txt")
	const tgiBody = `{"generated_text":" Paris is the capital.","details":{"finish_reason":"eos_token","generated_tokens":6,"seed":null,"prefill":[],"tokens":[]}}`
	const sglBody = `{"text":" Paris.","output_ids":[3681,13],"meta_info":{"id":"a","finish_reason":{"type":"stop","matched":2},"prompt_tokens":7,"completion_tokens":3,"cached_tokens":0}}`
	up := startRawUpstream(t, func(c *scriptConn) {
		path := string(c.Req.URI().Path())
		body := string(c.Req.Body())
		answer := ""
		switch {
		case strings.Contains(body, `"run by sglang"`):
			// a body naming both engines' inputs, to SGLang, which
			// does not read inputs
			if !strings.Contains(body, `"stream":true`) {
				answer = sglBody
			}
		case path == "/generate" && strings.Contains(body, `"inputs"`):
			answer = tgiBody
		case path == "/" && !strings.Contains(body, `"stream":true`):
			answer = "[" + tgiBody + "]"
		case path == "/generate" && !strings.Contains(body, `"stream":true`):
			answer = sglBody
		}
		if answer != "" {
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
			c.BW.Flush()
			return
		}
		writeSSEHead(c)
		if path == "/generate" {
			writeChunk(c, sgl)
		} else {
			writeChunk(c, tgi)
		}
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, c := range []struct {
		path, body string
		route      string
		stream     bool
		events     int
		isl, osl   int
		want       string
	}{
		{"/generate_stream", `{"inputs":"The capital of France is","parameters":{"max_new_tokens":16,"details":true}}`, "tgi_generate", true, 6, 9, 6, tgi},
		{"/", `{"inputs":"The capital of France is","parameters":{"details":true},"stream":true}`, "tgi_generate", true, 6, 9, 6, tgi},
		{"/generate", `{"inputs":"The capital of France is","parameters":{"details":true}}`, "tgi_generate", false, meter.Unknown, meter.Unknown, 6, tgiBody},
		{"/", `{"inputs":"The capital of France is","parameters":{"details":true}}`, "tgi_generate", false, meter.Unknown, meter.Unknown, 6, "[" + tgiBody + "]"},
		{"/generate", `{"text":"The capital of France is","sampling_params":{"max_new_tokens":16},"stream":true}`, "sglang_generate", true, 4, 7, 4, sgl},
		{"/generate", `{"input_ids":[791,6864,315,9822,374],"sampling_params":{"max_new_tokens":16}}`, "sglang_generate", false, meter.Unknown, 7, 3, sglBody},
		// both engines' inputs: metered as TGI's, run by SGLang, read in
		// SGLang's shape (found in review: no token, no count, ok)
		{"/generate", `{"inputs":"run by sglang","text":"The capital of France is","stream":true}`, "tgi_generate", true, 4, 7, 4, sgl},
		{"/generate", `{"inputs":"run by sglang","text":"The capital of France is"}`, "tgi_generate", false, meter.Unknown, 7, 3, sglBody},
	} {
		checkMeteredPost(t, g, meteredPost{c.path, c.body, c.route, c.stream, c.events, c.isl, c.osl, meter.OutcomeOK, c.want})
	}
}

// generateAPI tells TGI's body from SGLang's on /generate, and a
// generation on / from anything else; nativeRequest reads the output limit
// each engine reads, for the admission charge. Each body also padded past
// shallowFrom (parsed shallow).
func TestGenerateAPI(t *testing.T) {
	pad := `"pad":"` + strings.Repeat("x", shallowFrom) + `",`
	stopPad := `"stop":["` + strings.Repeat("y", keepWhole) + `"],`
	var p fastjson.Parser
	for _, c := range []struct {
		body      string
		root      bool
		want      meter.API
		maxTokens int
	}{
		{`{"inputs":"hi","parameters":{"max_new_tokens":20}}`, false, meter.APITGI, 20},
		{`{"inputs":"hi","parameters":{"max_new_tokens":20}}`, true, meter.APITGI, 20},
		{`{"inputs":"hi"}`, false, meter.APITGI, 0},
		{`{"inputs":"hi","max_tokens":5,"sampling_params":{"max_new_tokens":3}}`, false, meter.APITGI, 0}, // TGI reads neither
		{`{"text":"hi","sampling_params":{"max_new_tokens":30}}`, false, meter.APISGLang, 30},
		{`{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":30},"parameters":{"max_new_tokens":1}}`, false, meter.APISGLang, 30},
		{`{"text":["a","b"],"sampling_params":[{"max_new_tokens":8},{"max_new_tokens":12}]}`, false, meter.APISGLang, 12},
		{`{"text":["a","b"],"sampling_params":[{"max_new_tokens":8},{}]}`, false, meter.APISGLang, 0},
		{`{"input_embeds":[[0.1]]}`, false, meter.APISGLang, 0},
		// SGLang's SamplingParams takes any number (its check is only
		// below 0): 4000.0 or 1e4 generates to it, charged the default
		// when read as none. TGI's serde refuses a float: charged more.
		{`{"text":"hi","sampling_params":{"max_new_tokens":4000.0}}`, false, meter.APISGLang, 4000},
		{`{"text":"hi","sampling_params":{"max_new_tokens":1e4}}`, false, meter.APISGLang, 10000},
		{`{"text":"hi","sampling_params":{"max_new_tokens":2.5}}`, false, meter.APISGLang, 3},
		{`{"inputs":"hi","parameters":{"max_new_tokens":20.0}}`, false, meter.APITGI, 20},
		// both engines' inputs: either may run it, so the larger limit,
		// or the default when either has none
		{`{"inputs":"hi","text":"hi","parameters":{"max_new_tokens":5},"sampling_params":{"max_new_tokens":50}}`, false, meter.APITGI, 50},
		{`{"inputs":"hi","text":"hi","parameters":{"max_new_tokens":5}}`, false, meter.APITGI, 0},
		{`{"text":"hi"}`, true, meter.APIOther, 0}, // TGI alone serves /
		{`{"input":"hi"}`, true, meter.APIOther, 0},
		{`{"input":"hi"}`, false, meter.APITGI, 0},
		{`{"inputs":null,"text":null}`, false, meter.APITGI, 0},
		{`[{"inputs":"hi"}]`, true, meter.APITGI, 0},         // not an object: the checks of a metered body apply
		{`{"text":null,"text":"hi"}`, true, meter.APITGI, 0}, // a duplicate: refused
	} {
		for _, big := range []bool{false, true} {
			body := c.body
			if big && body[0] == '{' {
				body = "{" + pad + body[1:]
				// and each parameters object past keepWhole, by a stop
				// list both engines read
				for _, params := range []string{`"parameters":{`, `"sampling_params":{`, `"sampling_params":[{`} {
					body = strings.ReplaceAll(body, params, params+stopPad)
				}
			}
			got := generateAPI(&p, []byte(body), c.root)
			if got != c.want {
				t.Errorf("%.80s (root %v, large %v): %v, want %v", c.body, c.root, big, got, c.want)
				continue
			}
			ri, v := parseRequest(&p, []byte(body))
			if !ri.valid || duplicateKey(v) != "" {
				continue
			}
			nativeRequest(got, v, &ri)
			if ri.maxTokens != c.maxTokens && got != meter.APIOther {
				t.Errorf("%.80s (large %v): max tokens %d, want %d", c.body, big, ri.maxTokens, c.maxTokens)
			}
		}
	}
}

// TGI's and SGLang's streams and answers that end badly: a TGI stream cut
// before its last event (TGI ends every whole answer with it), one that
// ends with TGI's error event, an SGLang stream cut before its
// finish_reason and [DONE], one with SGLang's error event, and each
// engine's error answer. Each ends as one record with one outcome.
func TestGenerateRoutesEndBadly(t *testing.T) {
	tgi := fixtureText(t, "tgi/tgi-src-generate-stream-details.txt")
	tgiCut := tgi[:strings.LastIndex(strings.TrimSuffix(tgi, "\n\n"), "\n\n")+2] // every event but the last
	sgl := fixtureText(t, "sglang/sglang-src-generate-stream.txt")
	sglEvents := strings.SplitAfter(sgl, "\n\n")
	sglCut := sglEvents[0] + sglEvents[1] // two running events, no finish, no [DONE]
	const (
		tgiErr     = `data:{"error":"Request failed during generation: Server error: CUDA out of memory","error_type":"generation"}` + "\n\n"
		sglErr     = `data: {"error":{"message":"The request is aborted by the scheduler."}}` + "\n\n" + "data: [DONE]\n\n"
		tgiErrBody = `{"error":"Input validation error: inputs tokens + max_new_tokens must be <= 4096","error_type":"validation"}`
		sglErrBody = `{"error":{"message":"Either text, input_ids or input_embeds should be provided."}}`
	)
	answers := map[string]string{
		"1": tgiCut,
		"2": tgiCut[:strings.Index(tgiCut, "\n\n")+2] + tgiErr,
		"3": sglCut,
		"4": sglCut + sglErr,
	}
	up := startRawUpstream(t, func(c *scriptConn) {
		body := string(c.Req.Body())
		k := body[strings.Index(body, `"case":"`)+8:][:1]
		switch k {
		case "5", "6":
			answer, status := tgiErrBody, "422 Unprocessable Entity"
			if k == "6" {
				answer, status = sglErrBody, "400 Bad Request"
			}
			fmt.Fprintf(c.BW, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", status, len(answer), answer)
			c.BW.Flush()
			return
		}
		writeSSEHead(c)
		writeChunk(c, answers[k])
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, c := range []struct {
		path, body string
		route      string
		status     int
		outcome    meter.Outcome
		msg        string
		events     int
		osl        int
		source     meter.UsageSource
	}{
		{"/generate_stream", `{"inputs":"hi","case":"1"}`, "tgi_generate", 200, meter.OutcomeUpstreamError, errNoFinalEvent, 5, 5, meter.UsageEstimate},
		{"/generate_stream", `{"inputs":"hi","case":"2"}`, "tgi_generate", 200, meter.OutcomeUpstreamError, "error event in stream: Request failed during generation: Server error: CUDA out of memory", 1, 1, meter.UsageEstimate},
		{"/generate", `{"text":"hi","stream":true,"case":"3"}`, "sglang_generate", 200, meter.OutcomeUpstreamError, errNoFinish, 2, 2, meter.UsageContinuous},
		{"/generate", `{"text":"hi","stream":true,"case":"4"}`, "sglang_generate", 200, meter.OutcomeUpstreamError, "error event in stream: The request is aborted by the scheduler.", 2, 2, meter.UsageContinuous},
		{"/generate", `{"inputs":"hi","case":"5"}`, "tgi_generate", 422, meter.OutcomeClientError, "upstream status 422", meter.Unknown, meter.Unknown, meter.UsageNone},
		{"/generate", `{"input_ids":[],"case":"6"}`, "sglang_generate", 400, meter.OutcomeClientError, "upstream status 400", meter.Unknown, meter.Unknown, meter.UsageNone},
	} {
		name := c.path + " " + c.body
		status, _, _, err := post(t, g.URL()+c.path, c.body, nil)
		if err != nil || status != c.status {
			t.Fatalf("%s: status %d err %v", name, status, err)
		}
		rec := g.record(t)
		if rec.Route != c.route || rec.Outcome != c.outcome || rec.ErrorMessage != c.msg || rec.Events != c.events || rec.OSL != c.osl || rec.UsageSource != c.source {
			t.Errorf("%s: route %q outcome %v %q events %d osl %d (%v); want %q %v %q %d %d (%v)",
				name, rec.Route, rec.Outcome, rec.ErrorMessage, rec.Events, rec.OSL, rec.UsageSource,
				c.route, c.outcome, c.msg, c.events, c.osl, c.source)
		}
	}
}

// The admission charge of TGI's and SGLang's routes is their
// max_new_tokens, as max_tokens is on the OpenAI routes: a tenant of 1000
// tokens a minute is refused a request that may generate 5000 there, and
// admitted one of 16. As another route, each was charged its body's
// bytes/4 alone, and none was refused.
func TestGenerateRoutesCharged(t *testing.T) {
	const answer = `{"generated_text":" Paris.","details":{"finish_reason":"eos_token","generated_tokens":3,"seed":null,"prefill":[],"tokens":[]}}`
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{TPM: 1000})
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16})
	auth := map[string]string{"Authorization": "Bearer " + key}
	for _, c := range []struct {
		path, body string
		status     int
	}{
		{"/generate", `{"inputs":"hi","parameters":{"max_new_tokens":5000}}`, 429},
		{"/generate_stream", `{"inputs":"hi","parameters":{"max_new_tokens":5000}}`, 429},
		{"/", `{"inputs":"hi","parameters":{"max_new_tokens":5000}}`, 429},
		{"/generate", `{"text":"hi","sampling_params":{"max_new_tokens":5000}}`, 429},
		{"/generate", `{"text":"hi","sampling_params":{"max_new_tokens":16}}`, 200},
	} {
		status, _, _, err := post(t, g.URL()+c.path, c.body, auth)
		if err != nil || status != c.status {
			t.Errorf("%s %s: status %d, %v; want %d", c.path, c.body, status, err, c.status)
		}
		g.record(t)
	}
}

// TGI's non-streamed answer (/generate, and / without "stream") has no
// prompt count in its body, and no output count without details; TGI puts
// both in the answer's head, x-prompt-tokens and x-generated-tokens
// (router/src/server.rs: generate_internal sets them, for generate and
// compat_generate's answer alike; generate_stream_internal does not). The
// record takes them where the body lacks a count (the body's own wins); a
// header that is not a plain non-negative integer is no count, never an
// error; with best_of, x-generated-tokens counts the best sequence alone,
// so it is not the answer's output; a stream's head is not read (TGI sends
// no counts there). The headers reach the client as the engine sent them.
func TestTGIHeadCounts(t *testing.T) {
	tgi := fixtureText(t, "tgi/tgi-src-generate-stream-details.txt")
	noDetails := tgi[:strings.LastIndex(tgi, `"details":{`)] + `"details":null}` + "\n\n"
	const (
		plain   = `{"generated_text":" Paris is the capital."}`
		details = `{"generated_text":" Paris is the capital.","details":{"finish_reason":"eos_token","generated_tokens":6,"seed":null,"prefill":[],"tokens":[]}}`
	)
	up := startRawUpstream(t, func(c *scriptConn) {
		body := string(c.Req.Body())
		head := "X-Prompt-Tokens: 9\r\nX-Generated-Tokens: 6\r\n"
		switch {
		case strings.Contains(body, `"case":"bad"`):
			head = "X-Prompt-Tokens: 9 tokens\r\nX-Generated-Tokens: 6\r\n"
		case strings.Contains(body, `"case":"large"`):
			head = "X-Prompt-Tokens: 2147483648\r\nX-Generated-Tokens: -6\r\n"
		case strings.Contains(body, `"case":"other"`):
			head = "X-Generated-Tokens: 7\r\n"
		}
		head += "X-Compute-Type: gpu+optimized\r\n"
		if strings.Contains(body, `"stream":true`) {
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n%sTransfer-Encoding: chunked\r\n\r\n", head)
			c.BW.Flush()
			writeChunk(c, noDetails)
			endChunks(c)
			return
		}
		answer := plain
		switch {
		case strings.Contains(body, `"details":true`):
			answer = details
		case string(c.Req.URI().Path()) == "/":
			answer = "[" + plain + "]"
		}
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s", head, len(answer), answer)
		c.BW.Flush()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, c := range []struct {
		path, body string
		isl, osl   int
		source     meter.UsageSource
	}{
		{"/generate", `{"inputs":"The capital of France is"}`, 9, 6, meter.UsageUpstream},
		{"/", `{"inputs":"The capital of France is"}`, 9, 6, meter.UsageUpstream},
		{"/generate", `{"inputs":"The capital of France is","parameters":{"details":true},"case":"other"}`, meter.Unknown, 6, meter.UsageUpstream},
		{"/generate", `{"inputs":"The capital of France is","case":"bad"}`, meter.Unknown, 6, meter.UsageUpstream},
		{"/generate", `{"inputs":"The capital of France is","case":"large"}`, meter.Unknown, meter.Unknown, meter.UsageNone},
		{"/generate", `{"inputs":"The capital of France is","parameters":{"best_of":2,"do_sample":true}}`, 9, meter.Unknown, meter.UsageUpstream},
		{"/generate_stream", `{"inputs":"The capital of France is","stream":true}`, meter.Unknown, 5, meter.UsageEstimate},
	} {
		name := c.path + " " + c.body
		status, hdr, _, err := post(t, g.URL()+c.path, c.body, nil)
		if err != nil || status != 200 || hdr.Get("X-Compute-Type") != "gpu+optimized" || hdr.Get("X-Generated-Tokens") == "" {
			t.Fatalf("%s: status %d err %v headers %v", name, status, err, hdr)
		}
		rec := g.record(t)
		if rec.Route != "tgi_generate" || rec.Outcome != meter.OutcomeOK || rec.ISL != c.isl || rec.OSL != c.osl || rec.UsageSource != c.source {
			t.Errorf("%s: route %q %v (%s) isl %d osl %d (%v); want ok %d %d (%v)",
				name, rec.Route, rec.Outcome, rec.ErrorMessage, rec.ISL, rec.OSL, rec.UsageSource, c.isl, c.osl, c.source)
		}
	}
}

// A non-streamed TGI answer larger than the gateway reads to meter a body
// (MaxJSONBytes) passes through unread, but its counts came in its head
// (x-prompt-tokens, x-generated-tokens): the record keeps them, and its
// message says the body was not read and where the counts came from, not
// that the answer was not metered. Without the headers it is as any body
// over the limit: no counts, "not metered". Outcome ok either way: the
// engine answered in full, the gateway did not read it.
func TestTGIAnswerOverTheLimitKeepsHeadCounts(t *testing.T) {
	const limit = 1 << 10
	answer := `{"generated_text":"` + strings.Repeat("x", 2*limit) + `"}`
	up := startRawUpstream(t, func(c *scriptConn) {
		head := ""
		switch body := string(c.Req.Body()); {
		case strings.Contains(body, `"case":"both"`), strings.Contains(body, `"best_of"`):
			head = "X-Prompt-Tokens: 9\r\nX-Generated-Tokens: 6\r\n"
		case strings.Contains(body, `"case":"output"`):
			head = "X-Generated-Tokens: 7\r\n"
		}
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s", head, len(answer), answer)
		c.BW.Flush()
	})
	g := startGateway(t, Config{Upstream: up.URL(), MaxJSONBytes: limit})
	const over = "response body larger than 1024 bytes, the most the gateway reads to meter a non-streamed body; "
	for _, c := range []struct {
		body     string
		isl, osl int
		source   meter.UsageSource
		msg      string
	}{
		{`{"inputs":"hi","case":"both"}`, 9, 6, meter.UsageUpstream, over + "not read: its ISL and OSL are the engine's x-prompt-tokens and x-generated-tokens headers"},
		{`{"inputs":"hi","case":"output"}`, meter.Unknown, 7, meter.UsageUpstream, over + "not read: its OSL is the engine's x-generated-tokens header, its ISL unknown"},
		{`{"inputs":"hi","parameters":{"best_of":2,"do_sample":true}}`, 9, meter.Unknown, meter.UsageUpstream, over + "not read: its ISL is the engine's x-prompt-tokens header, its OSL unknown"},
		{`{"inputs":"hi","case":"none"}`, meter.Unknown, meter.Unknown, meter.UsageNone, over + "not metered"},
	} {
		status, _, body, err := post(t, g.URL()+"/generate", c.body, nil)
		if err != nil || status != 200 || body != answer {
			t.Fatalf("%s: status %d, %d bytes of %d, %v", c.body, status, len(body), len(answer), err)
		}
		rec := g.record(t)
		if rec.Route != "tgi_generate" || rec.Outcome != meter.OutcomeOK || rec.ISL != c.isl || rec.OSL != c.osl || rec.UsageSource != c.source || rec.ErrorMessage != c.msg {
			t.Errorf("%s: route %q %v isl %d osl %d (%v) %q; want ok, isl %d osl %d (%v) %q",
				c.body, rec.Route, rec.Outcome, rec.ISL, rec.OSL, rec.UsageSource, rec.ErrorMessage, c.isl, c.osl, c.source, c.msg)
		}
	}
}

// SGLang answers k prompts of n samples (sampling_params.n) with k·n
// outputs, each prompt's one after the other, each with its prompt's
// prompt_tokens (tokenizer_manager.py, _handle_batch_request): the record
// counts each prompt once (it summed them all, n times the prompts), the
// output of every sample. So for a body read shallow (past shallowFrom,
// its sampling_params past keepWhole).
func TestSGLangSamplesCountEachPromptOnce(t *testing.T) {
	out := func(id string, prompt, completion int) string {
		return fmt.Sprintf(`{"text":" x","output_ids":[87],"meta_info":{"id":%q,"finish_reason":{"type":"length","length":%d},"prompt_tokens":%d,"completion_tokens":%d,"cached_tokens":0}}`,
			id, completion, prompt, completion)
	}
	answers := map[string]string{
		"two": "[" + out("a1", 7, 3) + "," + out("a2", 7, 4) + "," + out("b1", 6, 5) + "," + out("b2", 6, 6) + "]",
		"one": "[" + out("a1", 7, 3) + "," + out("a2", 7, 4) + "," + out("a3", 7, 1) + "]",
		"big": "[" + strings.Repeat(out("a", 7, 1)+",", 63) + out("a", 7, 1) + "]",
	}
	up := startRawUpstream(t, func(c *scriptConn) {
		body := string(c.Req.Body())
		answer := answers[body[strings.Index(body, `"case":"`)+8:][:3]]
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	pad := `"pad":"` + strings.Repeat("x", shallowFrom) + `",`
	stopPad := `"stop":["` + strings.Repeat("y", keepWhole) + `"],`
	for _, c := range []struct {
		body     string
		isl, osl int
	}{
		{`{"case":"two","text":["The capital of France is","Rome is in"],"sampling_params":{"n":2,"max_new_tokens":8,"temperature":0.7}}`, 13, 18},
		{`{"case":"two","text":["The capital of France is","Rome is in"],"sampling_params":[{"max_new_tokens":8,"n":2},{"n":2,"max_new_tokens":8}]}`, 13, 18},
		{`{"case":"one","text":"The capital of France is","sampling_params":{"n":3,"max_new_tokens":8,"temperature":0.7},"n":1}`, 7, 8},
		// 64 samples a prompt: which outputs are a prompt's first is not
		// kept (the meter keeps up to 63), so the prompt count is unknown
		{`{"case":"big","input_ids":[791,6864],"sampling_params":{"n":64,"max_new_tokens":1}}`, meter.Unknown, 64},
	} {
		for _, big := range []bool{false, true} {
			body := c.body
			if big {
				body = "{" + pad + body[1:]
				for _, params := range []string{`"sampling_params":{`, `"sampling_params":[{`} {
					body = strings.ReplaceAll(body, params, params+stopPad)
				}
			}
			checkMeteredPost(t, g, meteredPost{"/generate", body, "sglang_generate", false, meter.Unknown, c.isl, c.osl, meter.OutcomeOK, answers[body[strings.Index(body, `"case":"`)+8:][:3]]})
		}
	}
}

// SGLang's stream of several prompts or samples interleaves its outputs'
// events, each with its output's running count and, on its finishing
// event, the output's total; no count of the whole comes. Through the
// gateway (the stream written one byte a chunk), the record sums the
// totals once [DONE] came with every output ended: OSL 3+2+4+1, ISL each
// prompt's once (7 and 6, n 2). It estimated the OSL and left the ISL
// unknown, as it still does for a stream cut before [DONE].
func TestSGLangBatchStreamSummed(t *testing.T) {
	batch := fixtureText(t, "sglang/sglang-src-generate-stream-batch.txt")
	cut := strings.TrimSuffix(batch, "data: [DONE]\n\n")
	up := startRawUpstream(t, func(c *scriptConn) {
		answer := batch
		switch body := string(c.Req.Body()); {
		case strings.Contains(body, `"case":"cut"`):
			answer = cut
		case strings.Contains(body, `"case":"early"`):
			answer = strings.Join(strings.SplitAfter(batch, "\n\n")[:4], "")
		}
		writeSSEHead(c)
		for i := range len(answer) {
			writeChunk(c, answer[i:i+1])
		}
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	const body = `{"text":["The capital of France is","Rome is the capital of"],"sampling_params":{"n":2,"max_new_tokens":8,"temperature":0.7},"stream":true`
	checkMeteredPost(t, g, meteredPost{"/generate", body + "}", "sglang_generate", true, 10, 13, 10, meter.OutcomeOK, batch})
	status, _, got, err := post(t, g.URL()+"/generate", body+`,"case":"cut"}`, nil)
	if err != nil || status != 200 || got != cut {
		t.Fatalf("cut: status %d err %v body %q", status, err, got)
	}
	if rec := g.record(t); rec.ISL != meter.Unknown || rec.OSL != 10 || rec.UsageSource != meter.UsageEstimate || rec.Events != 10 || rec.Outcome != meter.OutcomeOK {
		t.Errorf("cut: %v isl %d osl %d (%v) events %d; want ok, unknown, 10 (estimate), 10", rec.Outcome, rec.ISL, rec.OSL, rec.UsageSource, rec.Events)
	}
	// Cut after one output's finishing event (output 3's), the others
	// still running: the stream was cut short, as one cut before its
	// finish_reason is (one output's end is not the others'), and the
	// record says it was cut between its outputs' ends.
	early := strings.Join(strings.SplitAfter(batch, "\n\n")[:4], "")
	status, _, got, err = post(t, g.URL()+"/generate", body+`,"case":"early"}`, nil)
	if err != nil || status != 200 || got != early {
		t.Fatalf("early: status %d err %v body %q", status, err, got)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeUpstreamError || rec.ErrorMessage != errOutputsUnfinished || rec.ISL != meter.Unknown || rec.OSL != 4 || rec.UsageSource != meter.UsageEstimate {
		t.Errorf("early: %v %q isl %d osl %d (%v); want upstream_error %q, unknown, 4 (estimate)", rec.Outcome, rec.ErrorMessage, rec.ISL, rec.OSL, rec.UsageSource, errOutputsUnfinished)
	}
}

// TGI's parameters and SGLang's sampling_params (an object, or a list of
// them, one a prompt) hold what the gateway reads of those routes' bodies:
// max_new_tokens (charged at admission), TGI's best_of, SGLang's n (which
// outputs are a prompt's first: each prompt's count is taken once). The
// gateway reads a name's first value, SGLang (Python's json) its last, so
// a name one of them holds twice is refused, as a duplicate at the top
// level is: "n":2,"n":1 ran one sample a prompt and counted each second
// prompt as a sample of the first (the ISL halved: 7000 of 13000), and
// "max_new_tokens":1,"max_new_tokens":8000 was charged 1 at admission. A
// name once in each of two objects is no duplicate.
func TestNativeParamsDuplicateKeysRejected(t *testing.T) {
	out := func(id string, prompt, completion int) string {
		return fmt.Sprintf(`{"text":" x","output_ids":[87],"meta_info":{"id":%q,"finish_reason":{"type":"length","length":%d},"prompt_tokens":%d,"completion_tokens":%d,"cached_tokens":0}}`,
			id, completion, prompt, completion)
	}
	answer := "[" + out("a", 7000, 3) + "," + out("b", 6000, 5) + "]"
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	pad := `"pad":"` + strings.Repeat("x", shallowFrom) + `",`
	stopPad := `"stop":["` + strings.Repeat("y", keepWhole) + `"],`
	for _, c := range []struct{ path, body, key string }{
		{"/generate", `{"text":["A","B"],"sampling_params":{"n":2,"max_new_tokens":8,"n":1}}`, `"sampling_params.n"`},
		{"/generate", `{"text":["A","B"],"sampling_params":{"n":2,"\u006e":1,"max_new_tokens":8}}`, `"sampling_params.n"`},
		{"/generate", `{"text":["A","B"],"sampling_params":[{"n":1,"max_new_tokens":8},{"n":1,"max_new_tokens":1,"max_new_tokens":8000}]}`, `"sampling_params[1].max_new_tokens"`},
		{"/generate", `{"inputs":"A","parameters":{"max_new_tokens":1,"best_of":1,"max_new_tokens":8000}}`, `"parameters.max_new_tokens"`},
		{"/", `{"inputs":"A","parameters":{"best_of":1,"best_of":2,"do_sample":true}}`, `"parameters.best_of"`},
		{"/generate_stream", `{"inputs":"A","parameters":{"max_new_tokens":1,"max_new_tokens":8000}}`, `"parameters.max_new_tokens"`},
	} {
		for _, big := range []bool{false, true} {
			body := c.body
			if big {
				body = "{" + pad + body[1:]
				for _, params := range []string{`"sampling_params":{`, `"sampling_params":[{`, `"parameters":{`} {
					body = strings.ReplaceAll(body, params, params+stopPad)
				}
			}
			status, _, resp, err := post(t, g.URL()+c.path, body, nil)
			if err != nil || status != 400 || !strings.Contains(resp, "duplicate key") || !strings.Contains(resp, strings.ReplaceAll(c.key, `"`, `\"`)) {
				t.Fatalf("%s %.200s: status %d body %s err %v", c.path, body, status, resp, err)
			}
			if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || rec.Status != 400 {
				t.Fatalf("%s %.200s: record %+v", c.path, body, rec)
			}
		}
	}
	if n := up.accepts.Load(); n != 0 {
		t.Fatalf("the engine was contacted %d times", n)
	}
	// Each prompt's sampling_params names n once: counted as sent.
	checkMeteredPost(t, g, meteredPost{"/generate", `{"text":["A","B"],"sampling_params":[{"n":1,"max_new_tokens":8},{"n":1,"max_new_tokens":8}]}`, "sglang_generate", false, meter.Unknown, 13000, 8, meter.OutcomeOK, answer})
}
