package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/valyala/fastjson"
)

// vLLM's SageMaker route, POST /invocations, generates as chat when its
// body is a chat request and as completions when it is a completions one
// (vLLM tries them in that order): it is metered as those routes, and its
// tokens are charged as theirs. Passed through as another route, it was
// charged its body's bytes/4 and never its output, so a tenant passed its
// token limits (and its per-model limits) by asking there.
func TestInvocationsMetered(t *testing.T) {
	const (
		chat  = `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"length"}],"usage":{"prompt_tokens":10,"completion_tokens":300,"total_tokens":310}}`
		compl = `{"id":"c","object":"text_completion","model":"m","choices":[{"index":0,"text":"hi","finish_reason":"length"}],"usage":{"prompt_tokens":10,"completion_tokens":300,"total_tokens":310}}`
		embed = `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5]}],"usage":{"prompt_tokens":3,"total_tokens":3}}`
	)
	up := startRawUpstream(t, func(c *scriptConn) {
		b := string(c.Req.Body())
		answer := embed
		switch {
		case strings.Contains(b, `"messages"`):
			answer = chat
		case strings.Contains(b, `"prompt"`):
			answer = compl
		}
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{TPM: 1000})
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16})
	auth := map[string]string{"Authorization": "Bearer " + key}
	for _, c := range []struct{ body, route string }{
		{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "chat"},
		{`{"model":"m","prompt":"hi"}`, "completions"},
		{`{"model":"m","input":"hi"}`, "other"},
	} {
		status, _, _, err := post(t, g.URL()+"/invocations", c.body, auth)
		if err != nil || status != 200 {
			t.Fatalf("%s: status %d, %v", c.body, status, err)
		}
		rec := g.record(t)
		if rec.Route != c.route || rec.Outcome != meter.OutcomeOK {
			t.Fatalf("%s: route %q outcome %s, want %q ok", c.body, rec.Route, rec.Outcome, c.route)
		}
		if c.route != "other" && (rec.ISL != 10 || rec.OSL != 300 || rec.Model != "m") {
			t.Fatalf("%s: isl %d osl %d model %q, want 10, 300 and m", c.body, rec.ISL, rec.OSL, rec.Model)
		}
	}
	// 1000 tokens a minute, 620 used by the two generations (and a few by
	// the embedding): two more generations are admitted, each on an
	// estimate of 30 (its body's bytes/4 and the default of 16), and used
	// 310, and the one after finds the bucket empty. As another route,
	// each was charged its body's bytes/4 (14) alone, and none was refused.
	var statuses []int
	for i := 0; i < 3; i++ {
		status, _, _, err := post(t, g.URL()+"/invocations", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, auth)
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, status)
		g.record(t)
	}
	if fmt.Sprint(statuses) != "[200 200 429]" {
		t.Fatalf("statuses %v, want [200 200 429]", statuses)
	}
}

// invocationAPI reads a body over shallowFrom as a small one: the shallow
// copy keeps prompt and prompt_embeds.
func TestInvocationAPI(t *testing.T) {
	pad := `"pad":"` + strings.Repeat("x", shallowFrom) + `",`
	var p fastjson.Parser
	for _, c := range []struct {
		body string
		want meter.API
	}{
		{`{"messages":[{"role":"user","content":"hi"}]}`, meter.APIChat},
		{`{"messages":null,"prompt":"hi"}`, meter.APICompletions},
		{`{"prompt":["a","b"]}`, meter.APICompletions},
		{`{"prompt":null,"prompt_embeds":"AAAA"}`, meter.APICompletions},
		{`{"prompt":null}`, meter.APIOther},
		{`{"input":"hi"}`, meter.APIOther},
		{`{"inputs":"hi","parameters":{}}`, meter.APIOther},
		{`[{"prompt":"hi"}]`, meter.APIChat},             // not an object: the checks of chat apply
		{`{"prompt":Infinity}`, meter.APIChat},           // not read by the gateway: likewise
		{`{"prompt":null,"prompt":"hi"}`, meter.APIChat}, // vLLM reads the last: refused as a duplicate
		{`{"input":"a","input":"b"}`, meter.APIChat},
	} {
		for _, big := range []bool{false, true} {
			body := c.body
			if big && body[0] == '{' {
				body = "{" + pad + body[1:]
			}
			if got := invocationAPI(&p, []byte(body)); got != c.want {
				t.Errorf("%.80s (large %v): %v, want %v", c.body, big, got, c.want)
			}
		}
	}
}
