package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/export"
	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/slo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fastjson"
)

// sglangAdapter reads the LoRA adapter of an SGLang body as SGLang does:
// lora_path on /generate (a string, or a batch's list, several when its
// elements differ); on chat and completions the adapter of a model written
// "base:adapter" (the first ':', spaces dropped), ahead of lora_path, both
// unsure (vLLM serves those routes too); nothing on the routes whose
// SGLang handlers read none (vLLM's chat_batch, the Responses API). A
// value of another type names none; so does a list holding one.
func TestSGLangAdapterOf(t *testing.T) {
	long := strings.Repeat(`"lora-a",`, 1000) // over keepWhole: a shallow copy's list
	cases := []struct {
		name     string
		api      meter.API
		onSGLang bool
		body     string
		adapter  string
		unsure   bool
		several  bool
	}{
		{"generate: a string", meter.APISGLang, true, `{"text":"hi","lora_path":"lora-a"}`, "lora-a", false, false},
		{"generate: a list of one", meter.APISGLang, true, `{"text":["hi"],"lora_path":["lora-a"]}`, "lora-a", false, false},
		{"generate: a list of the same", meter.APISGLang, true, `{"text":["a","b"],"lora_path":["lora-a","lora-a"]}`, "lora-a", false, false},
		{"generate: escaped alike", meter.APISGLang, true, `{"text":["a","b"],"lora_path":["lora-a","lora\u002da"]}`, "lora-a", false, false},
		{"generate: a list of several", meter.APISGLang, true, `{"text":["a","b"],"lora_path":["lora-a","lora-b"]}`, "", false, true},
		{"generate: an adapter and the base", meter.APISGLang, true, `{"text":["a","b"],"lora_path":["lora-a",null]}`, "", false, true},
		{"generate: the base and an adapter", meter.APISGLang, true, `{"text":["a","b"],"lora_path":[null,"lora-a"]}`, "", false, true},
		{"generate: all the base", meter.APISGLang, true, `{"text":["a","b"],"lora_path":[null,""]}`, "", false, false},
		{"generate: a long list of one adapter", meter.APISGLang, true, `{"text":"hi","lora_path":[` + long + `"lora-a"]}`, "lora-a", false, false},
		{"generate: a long list, another last", meter.APISGLang, true, `{"text":"hi","lora_path":[` + long + `"lora-b"]}`, "", false, true},
		{"generate: a number", meter.APISGLang, true, `{"text":"hi","lora_path":5}`, "", false, false},
		{"generate: an object", meter.APISGLang, true, `{"text":"hi","lora_path":{"a":"lora-a"}}`, "", false, false},
		{"generate: a list with a number", meter.APISGLang, true, `{"text":["a","b"],"lora_path":["lora-a",5]}`, "", false, false},
		{"generate: several, then a number", meter.APISGLang, true, `{"text":["a","b","c"],"lora_path":["lora-a","lora-b",5]}`, "", false, false},
		{"generate: an empty list", meter.APISGLang, true, `{"text":"hi","lora_path":[]}`, "", false, false},
		{"generate: no model read there", meter.APISGLang, true, `{"model":"base:lora-b","text":"hi","lora_path":"lora-a"}`, "lora-a", false, false},
		{"generate: not UTF-8", meter.APISGLang, true, "{\"text\":\"hi\",\"lora_path\":\"\xff\xfe\"}", "\xff\xfe", false, false},
		{"chat: base:adapter", meter.APIChat, false, `{"model":"base:lora-a","messages":[]}`, "lora-a", true, false},
		{"chat: the first colon, spaces dropped", meter.APIChat, false, `{"model":" org/base : lora:x ","messages":[]}`, "lora:x", true, false},
		{"chat: Python's white space dropped", meter.APIChat, false, `{"model":"base:\u001f\u001c\u00a0lora-a\u001e\u3000\u001d","messages":[]}`, "lora-a", true, false},
		{"chat: only white space", meter.APIChat, false, `{"model":"base:\u001f\u0085","lora_path":"lora-b","messages":[]}`, "lora-b", true, false},
		{"chat: the model's adapter first", meter.APIChat, false, `{"model":"base:lora-a","lora_path":"lora-b","messages":[]}`, "lora-a", true, false},
		{"chat: an empty adapter, lora_path", meter.APIChat, false, `{"model":"base: ","lora_path":"lora-b","messages":[]}`, "lora-b", true, false},
		{"chat: lora_path", meter.APIChat, false, `{"model":"base","lora_path":"lora-b","messages":[]}`, "lora-b", true, false},
		{"completions: base:adapter", meter.APICompletions, false, `{"model":"base:lora-a","prompt":"hi"}`, "lora-a", true, false},
		{"completions: a batch of several", meter.APICompletions, false, `{"model":"base","prompt":["a","b"],"lora_path":["lora-a","lora-b"]}`, "", true, true},
		{"chat_batch: vLLM's", meter.APIChatBatch, false, `{"model":"base:lora-a","lora_path":"lora-b","messages":[[]]}`, "", false, false},
		{"responses: none read", meter.APIResponses, false, `{"model":"base:lora-a","lora_path":"lora-b","input":"hi"}`, "", false, false},
		{"tgi: none read", meter.APITGI, false, `{"inputs":"hi","lora_path":"lora-a"}`, "", false, false},
	}
	var p fastjson.Parser
	for _, c := range cases {
		for _, pad := range []string{"", strings.Repeat(" ", shallowFrom)} {
			body := c.body[:1] + pad + c.body[1:]
			ri, v := parseRequest(&p, []byte(body))
			if !ri.valid {
				t.Fatalf("%s: not read", c.name)
			}
			a, unsure, several := sglangAdapter(c.api, v, ri.model, c.onSGLang)
			if a != c.adapter || unsure != c.unsure || several != c.several {
				t.Errorf("%s (shallow %v): %q, unsure %v, several %v; want %q, %v, %v", c.name, pad != "", a, unsure, several, c.adapter, c.unsure, c.several)
			}
		}
	}
}

// A hostile lora_path (a list of a million names, one of a million
// elements of another type) is read in one walk, its shallow copy is a few
// elements, and reading it allocates the adapter's name alone.
func TestSGLangAdapterHostile(t *testing.T) {
	huge := `{"text":"hi","lora_path":[` + strings.Repeat(`"lora-a",`, 1<<20) + `"lora-a"]}`
	var p fastjson.Parser
	v, _, err := parseShallow(&p, []byte(huge))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(v.GetArray("lora_path")); n != 1 {
		t.Errorf("shallow copy of a list of one adapter: %d elements, want 1", n)
	}
	if a, _, several := sglangAdapter(meter.APISGLang, v, "", true); a != "lora-a" || several {
		t.Errorf("%q, several %v; want lora-a", a, several)
	}
	if n := testenv.AllocsPerRun(100, func() { sglangAdapter(meter.APISGLang, v, "", true) }); n > 1 {
		t.Errorf("%v allocations, want at most the name's", n)
	}
	mixed := `{"text":"hi","lora_path":[` + strings.Repeat(`"lora-a",null,{},`, 1<<18) + `"lora-a"]}`
	if v, _, err = parseShallow(&p, []byte(mixed)); err != nil {
		t.Fatal(err)
	}
	if n := len(v.GetArray("lora_path")); n != 3 {
		t.Errorf("shallow copy of a mixed list: %d elements, want 3", n)
	}
	if a, _, several := sglangAdapter(meter.APISGLang, v, "", true); a != "" || several {
		t.Errorf("%q, several %v; want none (an object in the list)", a, several)
	}
}

// SGLang runs the LoRA adapter its body names (lora_path; on chat and
// completions, /invocations' too, the adapter of a "base:adapter" model
// first): a request naming an adapter the tenant lists as a model is held
// by that model's limits, and one naming an adapter it does not list as
// it would be without it (its model's, or the default model's when it
// names none). On chat and completions, which vLLM serves too (and vLLM
// ignores lora_path), an adapter holds a request only when its model
// matches none of the tenant's: a client cannot leave its model's limits
// by naming an adapter. A batch naming several adapters is refused (400).
// vLLM's chat_batch and the Responses API read no adapter. A large body's
// shallow copy keeps what is read. The record keeps the model given.
func TestSGLangAdapterHeldByItsLimits(t *testing.T) {
	prefix := fmt.Sprintf("gp-test-sgl-adapter-%d", time.Now().UnixNano())
	pad := strings.Repeat(" ", 70<<10)
	long := strings.Repeat(`"lora-a",`, 1000)
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	type request struct {
		path, body string
		status     int
	}
	for _, backend := range []ratelimit.BackendConfig{{}, {Backend: "redis", Redis: ratelimit.RedisConfig{URL: redisURL(t), KeyPrefix: prefix}}} {
		name := backend.Backend
		if name == "" {
			name = "local"
		}
		for _, c := range []struct {
			name     string
			models   map[string]ratelimit.Limits
			requests []request
		}{
			{"a listed adapter's limits", map[string]ratelimit.Limits{"base": {TPM: 1 << 20}, "lora-a": {TPM: 1000}}, []request{
				{"/generate", `{"text":"hi","lora_path":"lora-a","sampling_params":{"max_new_tokens":5000}}`, 429},
				{"/generate", `{"model":"base","text":"hi","lora_path":"lora-a","sampling_params":{"max_new_tokens":5000}}`, 429},
				{"/generate", `{"text":["hi"],"lora_path":["lora-a"],"sampling_params":{"max_new_tokens":5000}}`, 429},
				{"/generate", `{"text":["a","b"],"lora_path":["lora-a","lora-a"],"sampling_params":{"max_new_tokens":5000}}`, 429},
				{"/generate", `{"text":"hi"` + pad + `,"lora_path":"lora-a","sampling_params":{"max_new_tokens":5000}}`, 429},
				{"/generate", `{"text":"hi"` + pad + `,"lora_path":[` + long + `"lora-a"],"sampling_params":{"max_new_tokens":5000}}`, 429},
				{"/generate", `{"inputs":"hi","text":"hi","lora_path":"lora-a","parameters":{"adapter_id":"lora-a","max_new_tokens":5000},"sampling_params":{"max_new_tokens":5000}}`, 429},
				{"/generate", `{"text":"hi","lora_path":"lora-a","sampling_params":{"max_new_tokens":500}}`, 200},
				{"/generate", `{"model":"base","text":"hi","lora_path":"unlisted","sampling_params":{"max_new_tokens":5000}}`, 200},
				{"/generate", `{"text":"hi","lora_path":5,"sampling_params":{"max_new_tokens":5000}}`, 200},
				{"/generate", `{"text":["a","b"],"lora_path":["lora-a","lora-b"],"sampling_params":{"max_new_tokens":5}}`, 400},
				{"/generate", `{"text":["a","b"],"lora_path":["unlisted",null],"sampling_params":{"max_new_tokens":5}}`, 200}, // both the default model's
				{"/generate", `{"text":"hi"` + pad + `,"lora_path":[` + long + `"lora-b"],"sampling_params":{"max_new_tokens":5}}`, 400},
				{"/v1/chat/completions", `{"model":"base:lora-a","max_tokens":5000,` + msgs + `}`, 429},
				{"/v1/chat/completions", `{"model":" base : lora-a ","max_tokens":5000,` + msgs + `}`, 429},
				{"/v1/chat/completions", `{"model":"base:lora-a"` + pad + `,"max_tokens":5000,` + msgs + `}`, 429},
				{"/v1/chat/completions", `{"model":"unlisted","lora_path":"lora-a","max_tokens":5000,` + msgs + `}`, 429},
				{"/v1/chat/completions", `{"model":"base:","lora_path":"lora-a","max_tokens":5000,` + msgs + `}`, 429},
				{"/v1/completions", `{"model":"base:lora-a","prompt":"hi","max_tokens":5000}`, 429},
				{"/invocations", `{"model":"base:lora-a","max_tokens":5000,` + msgs + `}`, 429},
				// vLLM runs base here: its limits hold the request.
				{"/v1/chat/completions", `{"model":"base","lora_path":"lora-a","max_tokens":5000,` + msgs + `}`, 200},
				{"/v1/chat/completions", `{"lora_path":"lora-a","max_tokens":5000,` + msgs + `}`, 200},
				// Not read on vLLM's chat_batch, nor the Responses API.
				{"/v1/chat/completions/batch", `{"model":"base:lora-a","lora_path":"lora-a","max_tokens":5000,"messages":[[{"role":"user","content":"hi"}]]}`, 200},
				{"/v1/responses", `{"model":"base:lora-a","lora_path":"lora-a","max_output_tokens":5000,"input":"hi"}`, 200},
			}},
			{"as without it, for an adapter not listed", map[string]ratelimit.Limits{"base": {TPM: 1000}, "lora-a": {TPM: 1 << 20}}, []request{
				{"/generate", `{"text":"hi","lora_path":"unlisted","sampling_params":{"max_new_tokens":5000}}`, 429},
				{"/generate", `{"model":"base","text":"hi","lora_path":"unlisted","sampling_params":{"max_new_tokens":5000}}`, 429},
				{"/generate", "{\"text\":\"hi\",\"lora_path\":\"\xff\xfe\",\"sampling_params\":{\"max_new_tokens\":5000}}", 429},
				{"/generate", `{"text":"hi","lora_path":"lora-a","sampling_params":{"max_new_tokens":5000}}`, 200},
				{"/v1/chat/completions", `{"model":"base","lora_path":"unlisted","max_tokens":5000,` + msgs + `}`, 429},
				{"/v1/chat/completions", `{"model":"base:lora-a","max_tokens":5000,` + msgs + `}`, 200},
			}},
		} {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				up := startRawUpstream(t, func(c *scriptConn) {
					answer := `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
					if string(c.Req.URI().Path()) == "/generate" {
						answer = `{"text":"hi","meta_info":{"prompt_tokens":1,"completion_tokens":1}}`
					}
					fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
					c.BW.Flush()
				})
				tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
				tc.Models = c.models
				tc.ModelDefault = map[string]bool{"base": true}
				b := backend
				if b.Backend == "redis" {
					b.Redis.KeyPrefix += "-" + strings.Fields(c.name)[1]
				}
				store, gate := newKeysAndGate(t, b, tc)
				g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16})
				auth := map[string]string{"Authorization": "Bearer " + key}
				for _, r := range c.requests {
					status, _, body, err := post(t, g.URL()+r.path, r.body, auth)
					rec := g.record(t)
					if err != nil || status != r.status {
						t.Errorf("%s %.120q: status %d %s, %v; want %d", r.path, r.body, status, body, err, r.status)
					}
					if r.status == 429 && !strings.Contains(body, "model limit") {
						t.Errorf("%s %.120q: %s, want the model limit's refusal", r.path, r.body, body)
					}
					if r.status == 400 && !strings.Contains(body, "LoRA adapters") {
						t.Errorf("%s %.120q: %s, want the several adapters' refusal", r.path, r.body, body)
					}
					if want := gjsonModel(r.body); r.status != 400 && rec.Model != want {
						t.Errorf("%s %.120q: record's model %q, want %q", r.path, r.body, rec.Model, want)
					}
				}
			})
		}
	}
}

// A request held by the limits of the LoRA adapter its body names is
// judged by the adapter's class (slo_by_model), which the engine runs
// whatever its model says: TGI's adapter_id and SGLang's lora_path beside
// a model with a class of its own, SGLang's "base:adapter". Judged by the
// name given first, they were judged by the base model's class. A request
// naming an adapter the tenant does not list is judged as without it.
func TestSLOByModelFollowsAdapter(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		answer := `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
		if string(c.Req.URI().Path()) == "/generate" {
			answer = `{"text":"hi","meta_info":{"prompt_tokens":1,"completion_tokens":1}}`
			if strings.Contains(string(c.Req.Body()), `"inputs"`) {
				answer = `{"generated_text":"hi"}`
			}
		}
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{RPM: 6000})
	tc.Models = map[string]ratelimit.Limits{"base": {}, "lora-a": {}}
	tc.ModelDefault = map[string]bool{"base": true}
	tc.SLO, tc.SLOByModel = "interactive", map[string]string{"base": "interactive", "lora-a": "batch"}
	if err := ratelimit.ValidateTenants([]ratelimit.TenantConfig{tc}); err != nil {
		t.Fatal(err)
	}
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	lab := export.NewLabeler(export.NewLabelSet(nil, 0), export.NewLabelSet(nil, 0))
	classes := map[string]*slo.Class{
		"interactive": {TTFT: cfgtypes.Duration(5 * time.Second), Objective: 0.99},
		"batch":       {E2E: cfgtypes.Duration(time.Minute), Objective: 0.9},
	}
	j, err := slo.NewJudger(slo.JudgerOptions{Config: slo.Config{SLOs: classes}, Labels: lab, Registry: prometheus.NewRegistry(),
		Tenants: []slo.TenantClasses{{Name: tc.Name, Class: tc.SLO, ByModel: tc.SLOByModel}}})
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, Judge: j})
	auth := map[string]string{"Authorization": "Bearer " + key}
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct{ path, body, want string }{
		{"/generate", `{"model":"base","text":"hi","lora_path":"lora-a"}`, "batch"},
		{"/generate", `{"text":"hi","lora_path":"lora-a"}`, "batch"},
		{"/generate", `{"model":"base","inputs":"hi","parameters":{"adapter_id":"lora-a"}}`, "batch"},
		{"/v1/chat/completions", `{"model":"base:lora-a",` + msgs + `}`, "batch"},
		{"/generate", `{"model":"base","text":"hi","lora_path":"unlisted"}`, "interactive"},
		{"/v1/chat/completions", `{"model":"base","lora_path":"lora-a",` + msgs + `}`, "interactive"},
	} {
		if status, _, body, err := post(t, g.URL()+c.path, c.body, auth); err != nil || status != 200 {
			t.Fatalf("%s %s: status %d %s, %v", c.path, c.body, status, body, err)
		}
		if rec := g.record(t); !rec.Judged || rec.SLO != c.want {
			t.Errorf("%s %s: judged %v by %q; want %q", c.path, c.body, rec.Judged, rec.SLO, c.want)
		}
	}
}

// A gateway key in lora_path is an adapter the tenant does not list: the
// request is held as without it (here refused by the default model's
// tpm), and the key is in neither the answer nor the record, which keep
// no adapter; a key in a "base:adapter" model is refused as any key in a
// model is.
func TestSGLangAdapterHoldingAKey(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		const answer = `{"text":"hi","meta_info":{"prompt_tokens":1,"completion_tokens":1}}`
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
	tc.Models = map[string]ratelimit.Limits{"base": {TPM: 1000}, "lora-a": {TPM: 1 << 20}}
	tc.ModelDefault = map[string]bool{"base": true}
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16})
	auth := map[string]string{"Authorization": "Bearer " + key}
	for _, c := range []struct {
		path, body string
		status     int
	}{
		{"/generate", `{"text":"hi","lora_path":"` + key + `","sampling_params":{"max_new_tokens":5000}}`, 429},
		{"/generate", `{"text":["a","b"],"lora_path":["` + key + `","` + key + `"],"sampling_params":{"max_new_tokens":5000}}`, 429},
		{"/generate", `{"text":["a","b"],"lora_path":["` + key + `","lora-a"],"sampling_params":{"max_new_tokens":5}}`, 400},
		{"/v1/chat/completions", `{"model":"base:` + key + `","messages":[{"role":"user","content":"hi"}]}`, 400},
	} {
		status, _, body, err := post(t, g.URL()+c.path, c.body, auth)
		rec := g.record(t)
		if err != nil || status != c.status {
			t.Errorf("%s: status %d %s, %v; want %d", c.path, status, body, err, c.status)
		}
		if js := string(rec.AppendJSON(nil)); strings.Contains(body, key) || strings.Contains(js, key) {
			t.Errorf("%s: the key in the answer %s or the record %s", c.path, body, js)
		}
	}
}

// A batch whose lora_path names several LoRA adapters is refused (400) only
// when they would hold its prompts by the limits of different models: a
// tenant that lists none of them (or no models at all) runs such a batch
// as it did before adapters counted, and so does one whose model it lists
// on chat and completions (where the adapter counts only when the model
// matches none). One naming an adapter the tenant lists beside another is
// refused, in a large body's shallow copy too when the listed one is not
// among the first two different names; so is one naming more than
// maxBatchAdapters different adapters.
func TestSeveralAdaptersRefusedWhenSplit(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		answer := `{"id":"x","object":"text_completion","choices":[{"index":0,"text":"hi","finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
		if string(c.Req.URI().Path()) == "/generate" {
			answer = `{"text":"hi","meta_info":{"prompt_tokens":1,"completion_tokens":1}}`
		}
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	pad := strings.Repeat(" ", 70<<10)
	many := make([]string, maxBatchAdapters+1)
	for i := range many {
		many[i] = fmt.Sprintf("%q", fmt.Sprintf("u%d", i))
	}
	for _, c := range []struct {
		name   string
		models map[string]ratelimit.Limits
		path   string
		body   string
		status int
	}{
		{"no models", nil, "/generate", `{"text":["a","b"],"lora_path":["lora-x","lora-y"]}`, 200},
		{"no models, an adapter and null", nil, "/generate", `{"text":["a","b"],"lora_path":["lora-x",null]}`, 200},
		{"none listed", map[string]ratelimit.Limits{"base": {TPM: 1 << 20}}, "/generate", `{"text":["a","b"],"lora_path":["lora-x","lora-y",null]}`, 200},
		{"the model listed, unsure", map[string]ratelimit.Limits{"base": {TPM: 1 << 20}, "lora-a": {TPM: 1 << 20}}, "/v1/completions", `{"model":"base","prompt":["a","b"],"lora_path":["lora-a","lora-y"]}`, 200},
		{"a listed one", map[string]ratelimit.Limits{"base": {TPM: 1 << 20}, "lora-a": {TPM: 1 << 20}}, "/generate", `{"text":["a","b"],"lora_path":["lora-x","lora-a"]}`, 400},
		{"a listed one, unsure", map[string]ratelimit.Limits{"base": {TPM: 1 << 20}, "lora-a": {TPM: 1 << 20}}, "/v1/completions", `{"model":"other","prompt":["a","b"],"lora_path":["lora-a","lora-y"]}`, 400},
		{"a listed one third, shallow", map[string]ratelimit.Limits{"base": {TPM: 1 << 20}, "lora-a": {TPM: 1 << 20}}, "/generate", `{"text":["a","b","c"]` + pad + `,"lora_path":["lora-x",` + strings.Repeat(`"lora-y",`, 1000) + `"lora-a"]}`, 400},
		{"too many", nil, "/generate", `{"text":"hi","lora_path":[` + strings.Join(many, ",") + `]}`, 400},
		{"too many, shallow", nil, "/generate", `{"text":"hi"` + pad + `,"lora_path":[` + strings.Join(many, ",") + `,` + strings.Repeat(`"u0",`, 1000) + `"u0"]}`, 400},
		{"as many as may be", nil, "/generate", `{"text":"hi"` + pad + `,"lora_path":[` + strings.Join(many[1:], ",") + `,` + strings.Repeat(`"u1",`, 1000) + `null]}`, 400},
		{"as many as may be, the same", nil, "/generate", `{"text":"hi"` + pad + `,"lora_path":[` + strings.Join(many[1:], ",") + `,` + strings.Repeat(`"u1",`, 1000) + `"u2"]}`, 200},
	} {
		tc, key := tenantWithKey(t, "acme", ratelimit.Limits{RPM: 6000})
		tc.Models = c.models
		if c.models != nil {
			tc.ModelDefault = map[string]bool{"base": true}
		}
		store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
		g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16})
		status, _, body, err := post(t, g.URL()+c.path, c.body, map[string]string{"Authorization": "Bearer " + key})
		rec := g.record(t)
		if err != nil || status != c.status {
			t.Errorf("%s: status %d %.200s, %v; want %d", c.name, status, body, err, c.status)
		}
		if c.status == 400 && (!strings.Contains(body, "LoRA adapters") || rec.Outcome != meter.OutcomeRejected) {
			t.Errorf("%s: %.200s, outcome %v; want the adapters' refusal", c.name, body, rec.Outcome)
		}
	}
}

// A batch whose lora_path names one listed adapter under several names (an
// alias, as Ollama reads a name) is held by that adapter's limits, as one
// naming it once is: held as naming no adapter, it ran the adapter under
// its default model's limits.
func TestSeveralNamesOfOneAdapterHeldByIt(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		const answer = `{"text":"hi","meta_info":{"prompt_tokens":1,"completion_tokens":1}}`
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{RPM: 6000})
	tc.Models = map[string]ratelimit.Limits{"base": {TPM: 1 << 20}, "lora-a": {TPM: 1000}}
	tc.ModelAliases = map[string][]string{"lora-a": {"a"}}
	tc.ModelDefault = map[string]bool{"base": true}
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16})
	for _, c := range []struct {
		body   string
		status int
	}{
		{`{"text":["x","y"],"lora_path":["lora-a","a"],"sampling_params":{"max_new_tokens":5000}}`, 429},
		{`{"text":["x","y"],"lora_path":["a","lora-a"],"sampling_params":{"max_new_tokens":5000}}`, 429},
		{`{"text":["x","y"],"lora_path":["a","lora-a"],"sampling_params":{"max_new_tokens":100}}`, 200},
		{`{"text":["x","y"],"lora_path":["u1","u2"],"sampling_params":{"max_new_tokens":5000}}`, 200},
	} {
		status, _, body, err := post(t, g.URL()+"/generate", c.body, map[string]string{"Authorization": "Bearer " + key})
		g.record(t)
		if err != nil || status != c.status {
			t.Errorf("%s: status %d %.200s, %v; want %d", c.body, status, body, err, c.status)
		}
	}
}

// A body on /generate naming both engines' inputs runs on TGI (which reads
// parameters.adapter_id and ignores lora_path) or on SGLang (which reads
// lora_path and ignores adapter_id): one whose adapter, either, would hold
// it by other limits than its model's is refused (400) when limits apply;
// held by lora_path's, TGI ran the base model under a listed adapter's
// limits, and held by its model's, TGI ran adapter_id's adapter under the
// base model's. One whose adapters the tenant does not list runs as
// without them.
func TestBothInputsAdapterRefused(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		const answer = `{"generated_text":"hi"}`
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{RPM: 6000})
	tc.Models = map[string]ratelimit.Limits{"base": {TPM: 1000}, "lora-a": {TPM: 1 << 20}, "lora-b": {TPM: 1000}}
	tc.ModelDefault = map[string]bool{"base": true}
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16})
	for _, c := range []struct {
		body   string
		status int
	}{
		// SGLang's adapter listed, TGI's none: TGI ran base under lora-a's limits.
		{`{"inputs":"hi","text":"hi","lora_path":"lora-a","parameters":{"max_new_tokens":5000},"sampling_params":{"max_new_tokens":5000}}`, 400},
		// TGI's adapter listed, SGLang's none: TGI ran lora-b under base's.
		{`{"inputs":"hi","text":"hi","parameters":{"adapter_id":"lora-b","max_new_tokens":10},"sampling_params":{"max_new_tokens":10}}`, 400},
		{`{"inputs":"hi","text":"hi","lora_path":"lora-a","parameters":{"adapter_id":"lora-b","max_new_tokens":10},"sampling_params":{"max_new_tokens":10}}`, 400},
		{`{"inputs":"hi","text":"hi","lora_path":["lora-a","lora-a"],"parameters":{"adapter_id":"lora-b","max_new_tokens":10},"sampling_params":{"max_new_tokens":10}}`, 400},
		// Both engines run lora-a: held by it.
		{`{"inputs":"hi","text":"hi","lora_path":"lora-a","parameters":{"adapter_id":"lora-a","max_new_tokens":5000},"sampling_params":{"max_new_tokens":5000}}`, 200},
		{`{"inputs":"hi","text":"hi","lora_path":"lora-b","parameters":{"adapter_id":"lora-b","max_new_tokens":5000},"sampling_params":{"max_new_tokens":5000}}`, 429},
		// Adapters the tenant does not list: as without them.
		{`{"inputs":"hi","text":"hi","lora_path":"unlisted","parameters":{"adapter_id":"other","max_new_tokens":5000},"sampling_params":{"max_new_tokens":5000}}`, 429},
		{`{"inputs":"hi","text":"hi","lora_path":"unlisted","parameters":{"max_new_tokens":10},"sampling_params":{"max_new_tokens":10}}`, 200},
		// TGI's body alone: its adapter_id holds it (adapterOf).
		{`{"inputs":"hi","parameters":{"adapter_id":"lora-a","max_new_tokens":5000}}`, 200},
	} {
		status, _, body, err := post(t, g.URL()+"/generate", c.body, map[string]string{"Authorization": "Bearer " + key})
		rec := g.record(t)
		if err != nil || status != c.status {
			t.Errorf("%s: status %d %.200s, %v; want %d", c.body, status, body, err, c.status)
		}
		if c.status == 400 && (!strings.Contains(body, "both TGI's and SGLang's") || rec.Outcome != meter.OutcomeRejected) {
			t.Errorf("%s: %.200s, outcome %v; want the refusal of both engines' adapters", c.body, body, rec.Outcome)
		}
	}
}
