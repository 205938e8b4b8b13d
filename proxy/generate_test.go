package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
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
	} {
		name := c.path + " " + c.body
		status, _, got, err := post(t, g.URL()+c.path, c.body, nil)
		if err != nil || status != 200 {
			t.Fatalf("%s: status %d err %v", name, status, err)
		}
		if got != c.want {
			t.Errorf("%s: the client got\n%q\nthe engine sent\n%q", name, got, c.want)
		}
		rec := g.record(t)
		if rec.Route != c.route || !rec.Inference() || rec.Stream != c.stream || rec.Outcome != meter.OutcomeOK ||
			rec.Events != c.events || rec.ISL != c.isl || rec.OSL != c.osl || rec.UsageSource != meter.UsageUpstream {
			t.Errorf("%s: route %q stream %v outcome %v (%s) events %d isl %d osl %d (%v); want %q %v ok %d %d %d (usage)",
				name, rec.Route, rec.Stream, rec.Outcome, rec.ErrorMessage, rec.Events, rec.ISL, rec.OSL, rec.UsageSource,
				c.route, c.stream, c.events, c.isl, c.osl)
		}
		if c.stream && (rec.TTFT <= 0 || rec.E2E < rec.TTFT || len(rec.ITL) != c.events-1) {
			t.Errorf("%s: ttft %v e2e %v gaps %d", name, rec.TTFT, rec.E2E, len(rec.ITL))
		}
	}
}

// generateAPI tells TGI's body from SGLang's on /generate, and a
// generation on / from anything else; nativeRequest reads the output limit
// each engine reads, for the admission charge. Each body also padded past
// shallowFrom (parsed shallow).
func TestGenerateAPI(t *testing.T) {
	pad := `"pad":"` + strings.Repeat("x", shallowFrom) + `",`
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
