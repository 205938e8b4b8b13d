package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
	"go.yaml.in/yaml/v3"
)

// ollamaForm reads names as Ollama's server does. The expected readings
// follow Ollama's source (internal/modelref's ParseRef, types/model's
// ParseName and IsValid, the server's getExistingName, which matches each
// part regardless of case), as of August 2026.
func TestOllamaForm(t *testing.T) {
	same := [][]string{
		{"llama3", "llama3:latest", "LLAMA3", "Llama3:LATEST", " llama3 ", "llama3\t", "library/llama3",
			"registry.ollama.ai/library/llama3:latest", "Registry.Ollama.AI/Library/llama3", "https://registry.ollama.ai/library/llama3",
			"llama3:local", "llama3:LOCAL", "llama3:latest:local", "llama3: local", "https:///library/llama3"},
		{"qwen2.5:7b", "QWEN2.5:7B", "qwen2.5:7b:local", "library/Qwen2.5:7b"},
		{"gpt-oss:20b:cloud", "gpt-oss:20b-cloud", "GPT-OSS:20B-Cloud", "gpt-oss:20b:CLOUD"},
		{"llama3:cloud", "llama3:latest:cloud"},
		{"myorg/mymodel", "myorg/mymodel:latest", "MyOrg/MyModel", "registry.ollama.ai/myorg/mymodel"},
		{"localhost:5000/ns/m", "LOCALHOST:5000/NS/M:latest"},
	}
	forms := map[string]string{}
	for _, group := range same {
		want, ok := ollamaForm(nil, group[0])
		if !ok {
			t.Fatalf("%q: refused", group[0])
		}
		for _, name := range group {
			got, ok := ollamaForm(nil, name)
			if !ok || string(got) != string(want) {
				t.Errorf("%q: %q, %v; want %q as %q", name, got, ok, want, group[0])
			}
		}
		if prev, dup := forms[string(want)]; dup {
			t.Errorf("%q and %q read alike (%q)", prev, group[0], want)
		}
		forms[string(want)] = group[0]
	}
	// Other models, and names Ollama refuses.
	for _, name := range []string{"llama3:8b", "myorg/llama3", "other.host/library/llama3", "llama3-cloud"} {
		got, ok := ollamaForm(nil, name)
		if !ok {
			t.Errorf("%q: refused", name)
		} else if prev, dup := forms[string(got)]; dup {
			t.Errorf("%q read as %q (%q)", name, prev, got)
		}
	}
	for _, name := range []string{"", " ", "llama3:", ":latest", "/llama3", "a//llama3", "llama 3", "lläma3", "llama3:cloud:local",
		"x:8b-cloud-cloud", "-llama3", "a/b/c/d", "ns.x/model", "model:ta:g/x", strings.Repeat("m", 81), "llama3:-cloud",
		"Meta-Llama-3.1-8B-Instruct/", "\u212aimi"} {
		if got, ok := ollamaForm(nil, name); ok {
			t.Errorf("%q: read as %q, want refused", name, got)
		}
	}
}

// A per-model limit holds whichever name a request gives the model: an
// engine's other spellings of it (Ollama's: case, a missing tag, the
// default namespace and host) and the aliases configured for it. Without
// the matching, each spelling was a model without limits.
func TestModelLimitsHoldEveryName(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		ts := []TenantConfig{{Name: "acme", Limits: Limits{MaxConcurrency: 100},
			Models: map[string]Limits{
				"llama3":                           {MaxConcurrency: 1},
				"meta-llama/Llama-3.1-8B-Instruct": {MaxConcurrency: 1},
				"qwen2.5:7b":                       {},
			},
			ModelAliases: map[string][]string{"meta-llama/Llama-3.1-8B-Instruct": {"llama-8b", "Llama 3.1 (8B)"}},
		}}
		l := mk(ts)
		for model, others := range map[string][]string{
			"llama3":                           {"llama3:latest", "LLAMA3", "Llama3:Latest", "library/llama3", "registry.ollama.ai/library/llama3", " llama3", "llama3:local"},
			"meta-llama/Llama-3.1-8B-Instruct": {"llama-8b", "Llama 3.1 (8B)", "LLAMA-8B", "llama-8b:latest", "meta-llama/llama-3.1-8b-instruct"},
			"llama-8b":                         {"meta-llama/Llama-3.1-8B-Instruct"},
		} {
			held, d := admit(t, l, t0, Request{Tenant: "acme", Model: model, EstTokens: 1})
			if !d.Allowed {
				t.Fatalf("%s: %+v", model, d)
			}
			for _, other := range others {
				tk, d := admit(t, l, t0, Request{Tenant: "acme", Model: other, EstTokens: 1})
				if d.Allowed || d.Limit != limitConcurrency || d.Scope != scopeModel {
					reconcile(t, l, t0, tk, 0)
					t.Errorf("%q while %q is in flight: %+v, want the model's concurrency limit", other, model, d)
				}
			}
			reconcile(t, l, t0, held, 0)
		}
		// Other models (another tag, the cloud's model, a model with no
		// limits that Ollama reads alike) are not held by llama3's.
		held, _ := admit(t, l, t0, Request{Tenant: "acme", Model: "llama3", EstTokens: 1})
		for _, other := range []string{"llama3:8b", "llama3:cloud", "myorg/llama3", "Llama 3", "QWEN2.5:7B", ""} {
			tk, d := admit(t, l, t0, Request{Tenant: "acme", Model: other, EstTokens: 1})
			if !d.Allowed {
				t.Errorf("%q: %+v, want allowed", other, d)
			}
			reconcile(t, l, t0, tk, 0)
		}
		reconcile(t, l, t0, held, 0)
	})
}

// A request that names no model (NoModel) counts against the limits of
// the tenant's default model: the one that says default: true, or a
// tenant's only model unless it says false; with several models and none
// the default, it has no model limits. vLLM runs its first served model
// for it: without the default, a tenant held to one model's concurrency
// or tokens passed them by leaving the model out. A request of a route
// that reads no model (Model "", not NoModel) has no model limits.
func TestUnnamedRequestsCountUnderDefault(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		top := Limits{MaxConcurrency: 100}
		l := mk([]TenantConfig{
			{Name: "chosen", Limits: top, Models: map[string]Limits{"llama3": {MaxConcurrency: 1, TPM: 1000}, "big": {MaxConcurrency: 1}},
				ModelDefault: map[string]bool{"llama3": true, "big": false}},
			{Name: "solo", Limits: top, Models: map[string]Limits{"llama3": {MaxConcurrency: 1}}},
			{Name: "optout", Limits: top, Models: map[string]Limits{"lora-a": {MaxConcurrency: 1}}, ModelDefault: map[string]bool{"lora-a": false}},
			{Name: "several", Limits: top, Models: map[string]Limits{"llama3": {MaxConcurrency: 1}, "big": {MaxConcurrency: 1}}},
		})
		unnamed := func(tenant string) Request { return Request{Tenant: tenant, NoModel: true, EstTokens: 1} }
		for _, c := range []struct {
			tenant, model string
			held          bool // an unnamed request is held by model's limits
		}{
			{"chosen", "llama3", true}, {"chosen", "big", false}, {"solo", "llama3", true},
			{"optout", "lora-a", false}, {"several", "llama3", false}, {"several", "big", false},
		} {
			// The model in flight holds an unnamed request, and an
			// unnamed request in flight holds the model.
			for _, order := range [2][2]Request{
				{{Tenant: c.tenant, Model: c.model, EstTokens: 1}, unnamed(c.tenant)},
				{unnamed(c.tenant), {Tenant: c.tenant, Model: c.model, EstTokens: 1}},
			} {
				first, d := admit(t, l, t0, order[0])
				if !d.Allowed {
					t.Fatalf("%s: %+v: %+v", c.tenant, order[0], d)
				}
				second, d := admit(t, l, t0, order[1])
				if held := !d.Allowed && d.Limit == limitConcurrency && d.Scope == scopeModel; held != c.held || !held && !d.Allowed {
					t.Errorf("%s: %+v while %+v is in flight: %+v; want held by %s's limits: %v", c.tenant, order[1], order[0], d, c.model, c.held)
				}
				reconcile(t, l, t0, second, 0)
				reconcile(t, l, t0, first, 0)
			}
		}
		// A route that reads no model: no model limits.
		held, _ := admit(t, l, t0, Request{Tenant: "chosen", Model: "llama3", EstTokens: 1})
		tk, d := admit(t, l, t0, Request{Tenant: "chosen", EstTokens: 1})
		if !d.Allowed {
			t.Errorf("no model read while llama3 is in flight: %+v, want allowed", d)
		}
		reconcile(t, l, t0, tk, 0)
		reconcile(t, l, t0, held, 0)
		// Unnamed requests are charged the default model's tokens.
		req := unnamed("chosen")
		req.EstTokens = 600
		tk, d = admit(t, l, t0, req)
		if !d.Allowed || d.Tokens.Limit != 1000 || d.Tokens.Remaining != 400 {
			t.Fatalf("first of 600 tokens: %+v, want llama3's tpm of 1000, 400 left", d)
		}
		reconcile(t, l, t0, tk, 600)
		if _, d := admit(t, l, t0, req); d.Allowed || d.Limit != limitTokens || d.Scope != scopeModel {
			t.Errorf("second of 600 tokens under a tpm of 1000: %+v, want llama3's token limit", d)
		}
	})
}

// A decision names the configured model the request was matched to
// (Decision.Model), the model whose class the SLO judge then applies:
// whatever name the request gave it, or none (the default model); "" for
// a model the tenant does not list. It does so for a rejection too, and
// when the backend fails (either policy), or the client leaves its line
// before the limiter decided: a request judged then (a wait that broke a
// bound) is judged by its model's class.
func TestDecisionNamesMatchedModel(t *testing.T) {
	ten := tenant("acme", Limits{RPM: 6000})
	ten.Models = map[string]Limits{"llama3": {MaxConcurrency: 1}, "big": {}}
	ten.ModelAliases = map[string][]string{"big": {"large"}}
	ten.ModelDefault = map[string]bool{"llama3": true}
	ts := []TenantConfig{ten}
	cases := []struct {
		req  Request
		want string
	}{
		{Request{Model: "llama3"}, "llama3"}, {Request{Model: "LLAMA3:latest"}, "llama3"},
		{Request{Model: "large"}, "big"}, {Request{Model: "big"}, "big"},
		{Request{NoModel: true}, "llama3"}, {Request{Model: "other"}, ""}, {Request{}, ""},
	}
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		l := mk(ts)
		for _, c := range cases {
			c.req.Tenant, c.req.EstTokens = "acme", 1
			tk, d := admit(t, l, t0, c.req)
			if !d.Allowed || d.Model != c.want {
				t.Errorf("%+v: allowed %v, model %q; want %q", c.req, d.Allowed, d.Model, c.want)
			}
			reconcile(t, l, t0, tk, 0)
		}
		held, _ := admit(t, l, t0, Request{Tenant: "acme", Model: "llama3", EstTokens: 1})
		if _, d := admit(t, l, t0, Request{Tenant: "acme", NoModel: true, EstTokens: 1}); d.Allowed || d.Model != "llama3" {
			t.Errorf("unnamed while llama3 is in flight: allowed %v, model %q; want rejected, llama3", d.Allowed, d.Model)
		}
		reconcile(t, l, t0, held, 0)
	})
	for _, policy := range []string{FailOpen, FailClosed} {
		r := newTestRedis(t, "redis://"+closedPort(t), "gptest", ts, func(c *BackendConfig, _ *redisOptions) { c.OnBackendError = policy })
		var d Decision
		_, err := r.Admit(context.Background(), t0, &Request{Tenant: "acme", Model: "large", EstTokens: 1}, &d)
		if err == nil || d.Limit != limitBackend || d.Model != "big" {
			t.Errorf("%s, Redis down: err %v, %+v; want a backend failure naming big", policy, err, d)
		}
		// The client left while Redis was asked (its context ended): not
		// a backend failure, and a request judged then (a queue wait that
		// broke a bound) is judged by its model's class all the same.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = r.Admit(ctx, t0, &Request{Tenant: "acme", Model: "large", EstTokens: 1}, &d)
		if !errors.Is(err, context.Canceled) || d.Limit != limitNone || d.Model != "big" {
			t.Errorf("%s, client gone during the Redis call: err %v, %+v; want the context's error naming big", policy, err, d)
		}
	}
	// The second in llama3's line leaves before its turn: the limiter
	// never decided on it.
	g := newGate(newLocal(ts), nil, 10*time.Second)
	g.poll = time.Hour
	var d Decision
	held, _, err := g.Admit(context.Background(), &Request{Tenant: "acme", Model: "llama3"}, &d)
	if err != nil || !d.Allowed {
		t.Fatal(err, d)
	}
	type result struct {
		err error
		d   Decision
	}
	results := make([]chan result, 2)
	cancels := make([]context.CancelFunc, 2)
	for i, req := range []Request{{Tenant: "acme", Model: "llama3"}, {Tenant: "acme", NoModel: true}} {
		ctx, cancel := context.WithCancel(context.Background())
		results[i], cancels[i] = make(chan result, 1), cancel
		go func() {
			var d Decision
			_, _, err := g.Admit(ctx, &req, &d)
			results[i] <- result{err, d}
		}()
		waitUntil(t, func() bool { return g.q.waiting.Load() == int64(i+1) })
	}
	cancels[1]()
	if r := <-results[1]; !errors.Is(r.err, context.Canceled) || r.d.Model != "llama3" {
		t.Errorf("left its line: err %v, %+v; want the context's error, naming llama3", r.err, r.d)
	}
	cancels[0]()
	<-results[0]
	g.Reconcile(context.Background(), held, 0)
}

// With Redis, a request that names no model counts in its default model's
// keys.
func TestRedisModelKeysOfUnnamed(t *testing.T) {
	url, prefix := redisTarget(t)
	ten := tenant("acme", Limits{})
	ten.Models = map[string]Limits{"llama3": {TPM: 500}, "big": {TPM: 500}}
	ten.ModelDefault = map[string]bool{"llama3": true}
	r := newTestRedis(t, url, prefix, []TenantConfig{ten}, nil)
	admit(t, r, t0, Request{Tenant: "acme", NoModel: true, EstTokens: 100})
	onlyKey(t, url, prefix, "{"+prefix+":acme}:m:llama3:t")
}

// onlyKey checks that want is the one key under prefix in Redis at url.
func onlyKey(t *testing.T, url, prefix, want string) {
	t.Helper()
	keys, err := rawClient(t, url).Keys(context.Background(), "{"+prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != want {
		t.Fatalf("keys %q, want only %q", keys, want)
	}
}

// With Redis, the names of a model share its keys: the configured name's.
func TestRedisModelKeysOfAliases(t *testing.T) {
	url, prefix := redisTarget(t)
	ten := tenant("acme", Limits{})
	ten.Models = map[string]Limits{"llama3": {TPM: 500}}
	ten.ModelAliases = map[string][]string{"llama3": {"l3"}}
	r := newTestRedis(t, url, prefix, []TenantConfig{ten}, nil)
	for _, m := range []string{"LLAMA3:latest", "l3", "llama3"} {
		admit(t, r, t0, Request{Tenant: "acme", Model: m, EstTokens: 100})
	}
	onlyKey(t, url, prefix, "{"+prefix+":acme}:m:llama3:t")
	_, d := admit(t, r, t0, Request{Tenant: "acme", Model: "Llama3", EstTokens: 300})
	if d.Allowed || d.Limit != limitTokens || d.Tokens.Remaining != 200 {
		t.Fatalf("%+v: want 200 tokens left of 500 after three requests of 100", d)
	}
}

// Matching a request's model allocates nothing: a configured name, an
// alias, another spelling, an unknown model (after the tenant's first
// request that is not a configured name), no model.
func TestModelMatchAllocatesNothing(t *testing.T) {
	mn := modelNames{lim: map[string]Limits{"llama3": {TPM: 1}, "big": {RPM: 1}},
		aliases: map[string][]string{"big": {"large"}}, def: "big"}
	for model, want := range map[string]string{"llama3": "llama3", "large": "big", "LLAMA3:latest": "llama3",
		"registry.ollama.ai/library/" + strings.Repeat("x", 80) + ":" + strings.Repeat("y", 80): "", "other": "", "": ""} {
		if got := mn.resolve(model, false); got != want {
			t.Errorf("%q: %q, want %q", model, got, want)
		}
		if n := testenv.AllocsPerRun(1000, func() { mn.resolve(model, false) }); n != 0 {
			t.Errorf("%q: %v allocations", model, n)
		}
	}
	if got := mn.resolve("", true); got != "big" {
		t.Errorf("no model: %q, want the default", got)
	}
	if n := testenv.AllocsPerRun(1000, func() { mn.resolve("", true) }); n != 0 {
		t.Errorf("no model: %v allocations", n)
	}
}

func TestModelAliasesYAML(t *testing.T) {
	var ts []TenantConfig
	src := `
- name: acme
  models:
    llama3: {tpm: 100, aliases: [l3, "llama3:8b"]}
    big: {rpm: 5}
    free: {aliases: [gratis]}
`
	if err := yaml.Unmarshal([]byte(src), &ts); err != nil {
		t.Fatal(err)
	}
	m := ts[0].Models
	if len(m) != 3 || m["llama3"] != (Limits{TPM: 100}) || m["big"] != (Limits{RPM: 5}) || !m["free"].IsZero() {
		t.Fatalf("models %+v", m)
	}
	a := ts[0].ModelAliases
	if len(a) != 2 || strings.Join(a["llama3"], ",") != "l3,llama3:8b" || strings.Join(a["free"], ",") != "gratis" {
		t.Fatalf("aliases %q", a)
	}
	if err := ValidateTenants(ts); err != nil {
		t.Fatal(err)
	}
	for src, want := range map[string]string{
		"- name: acme\n  limits: {rpm: 1, aliases: [x]}\n":              `unknown field "aliases"`,
		"- name: acme\n  models: {m: {rpm: 1, alias: [x]}}\n":           `unknown field "alias"`,
		"- name: acme\n  models: {m: {rpm: 1, aliases: x}}\n":           `cannot unmarshal`,
		"- name: acme\n  keys: [{id: k, limits: {aliases: [x]}}]\n":     `unknown field "aliases"`,
		"- name: acme\n  models: {m: {rpm: 1, aliases: [x], rpx: 1}}\n": `unknown field "rpx"`,
	} {
		var ts []TenantConfig
		err := yaml.Unmarshal([]byte(src), &ts)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %s", src, err, want)
		}
	}
}

// A model's default is read beside its limits and aliases, and at most
// one model of a tenant is the default.
func TestModelDefaultYAML(t *testing.T) {
	var ts []TenantConfig
	src := `
- name: acme
  models:
    llama3: {tpm: 100, aliases: [l3], default: true}
    big: {rpm: 5, default: false}
    free: {}
- name: solo
  models:
    only: {tpm: 1}
- name: lora
  models:
    adapter: {tpm: 1, default: false}
`
	if err := yaml.Unmarshal([]byte(src), &ts); err != nil {
		t.Fatal(err)
	}
	if err := ValidateTenants(ts); err != nil {
		t.Fatal(err)
	}
	if m := ts[0].Models; len(m) != 3 || m["llama3"] != (Limits{TPM: 100}) || m["big"] != (Limits{RPM: 5}) {
		t.Fatalf("models %+v", m)
	}
	if d := ts[0].ModelDefault; len(d) != 2 || !d["llama3"] || d["big"] {
		t.Fatalf("defaults %v", d)
	}
	for i, want := range []string{"llama3", "only", ""} {
		if got := ts[i].defaultModel(); got != want {
			t.Errorf("%s: default %q, want %q", ts[i].Name, got, want)
		}
	}
	for src, want := range map[string]string{
		"- name: acme\n  limits: {rpm: 1, default: true}\n":       `unknown field "default"`,
		"- name: acme\n  models: {m: {rpm: 1, default: maybe}}\n": "cannot unmarshal !!str `maybe` into bool",
		"- name: acme\n  models: {m: {rpm: 1, default: [x]}}\n":   `cannot unmarshal`,
		// Twice in one model, as any member of a mapping: refused, not the
		// last one read (yaml refuses "rpm" twice; these two are read here).
		"- name: acme\n  models:\n    m:\n      default: true\n      rpm: 1\n      default: false\n": `line 6: mapping key "default" already defined at line 4`,
		"- name: acme\n  models: {m: {aliases: [a], aliases: [b]}}\n":                                `line 2: mapping key "aliases" already defined at line 2`,
	} {
		var ts []TenantConfig
		err := yaml.Unmarshal([]byte(src), &ts)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %s", src, err, want)
		}
	}
	two := []TenantConfig{{Name: "acme", Models: map[string]Limits{"a": {}, "b": {}, "c": {}},
		ModelDefault: map[string]bool{"a": true, "b": false, "c": true, "d": true}}}
	err := ValidateTenants(two)
	want := []string{
		`tenants[0].models["d"].default: "d" is not one of the tenant's models`,
		`tenants[0].models["a"].default: 2 models say default: true ("a", "c"): a request that names no model counts against one model's limits only`,
		`tenants[0].models["c"].default: 2 models say default: true ("a", "c")`,
	}
	if err == nil || len(strings.Split(err.Error(), "\n")) != len(want) {
		t.Fatalf("%v, want %q", err, want)
	}
	for i, got := range strings.Split(err.Error(), "\n") {
		if !strings.HasPrefix(got, want[i]) {
			t.Errorf("\n%s\nwant\n%s", got, want[i])
		}
	}
}

func TestModelAliasErrors(t *testing.T) {
	for _, c := range []struct {
		name    string
		models  map[string]Limits
		aliases map[string][]string
		want    []string // "" entries: valid
	}{
		{"valid", map[string]Limits{"llama3": {TPM: 1}, "meta/Llama-3": {TPM: 2}},
			map[string][]string{"llama3": {"LLAMA3", "l3"}, "meta/Llama-3": {"llama-3"}}, nil},
		{"alias is another model", map[string]Limits{"a": {}, "b": {}}, map[string][]string{"a": {"b"}},
			[]string{`tenants[0].models["a"].aliases[0]: "b" is already a name of model "b" (tenants[0].models["b"])`}},
		{"alias of two models", map[string]Limits{"a": {}, "b": {}}, map[string][]string{"a": {"x"}, "b": {"y", "x"}},
			[]string{`tenants[0].models["b"].aliases[1]: "x" is already a name of model "a" (tenants[0].models["a"].aliases[0])`}},
		{"alias twice", map[string]Limits{"a": {}}, map[string][]string{"a": {"x", "x"}},
			[]string{`tenants[0].models["a"].aliases[1]: "x" is already a name of the model (tenants[0].models["a"].aliases[0])`}},
		{"alias is its model", map[string]Limits{"a": {}}, map[string][]string{"a": {"a"}},
			[]string{`tenants[0].models["a"].aliases[0]: "a" is already a name of the model (tenants[0].models["a"])`}},
		{"models the same to Ollama", map[string]Limits{"llama3": {TPM: 1}, "LLAMA3:latest": {TPM: 2}}, nil,
			[]string{`tenants[0].models["llama3"]: "llama3" and "LLAMA3:latest" (tenants[0].models["LLAMA3:latest"], of model "LLAMA3:latest") are the same model to Ollama`}},
		{"alias the same to Ollama as another model", map[string]Limits{"llama3": {}, "big": {}}, map[string][]string{"big": {"Llama3"}},
			[]string{`tenants[0].models["big"].aliases[0]: "Llama3" and "llama3" (tenants[0].models["llama3"], of model "llama3") are the same model to Ollama`}},
		{"bad alias", map[string]Limits{"a": {}}, map[string][]string{"a": {"", "x\ny", strings.Repeat("x", 257)}},
			[]string{`tenants[0].models["a"].aliases[0]: want a model name`, `tenants[0].models["a"].aliases[1]: want a model name`, `tenants[0].models["a"].aliases[2]: want a model name`}},
		{"aliases of no model", map[string]Limits{"a": {}}, map[string][]string{"b": {"x"}},
			[]string{`tenants[0].models["b"].aliases: "b" is not one of the tenant's models`}},
	} {
		err := ValidateTenants([]TenantConfig{{Name: "acme", Models: c.models, ModelAliases: c.aliases}})
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error, want %q", c.name, c.want)
			continue
		}
		got := strings.Split(err.Error(), "\n")
		if len(got) != len(c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], c.want[i]) {
				t.Errorf("%s:\n%s\nwant\n%s", c.name, got[i], c.want[i])
			}
		}
	}
}

// slo_by_model's keys are model names, and one that is another name of a
// configured model gives the model's own class (see validateSLOModels).
func TestSLOByModelNames(t *testing.T) {
	models := map[string]Limits{"llama3": {}, "big": {}}
	aliases := map[string][]string{"big": {"large"}}
	for _, c := range []struct {
		name  string
		byMod map[string]string
		want  []string // nil: valid
	}{
		{"models' names, and others", map[string]string{"llama3": "a", "big": "b", "qwen": "c"}, nil},
		{"another name agreeing", map[string]string{"big": "b", "large": "b", "LLAMA3": "a", "llama3:latest": "a", "llama3": "a"}, nil},
		{"an alias alone", map[string]string{"large": "b"},
			[]string{`tenants[0].slo_by_model["large"]: "large" is an alias of model "big": its class "b" would judge only`}},
		{"an Ollama spelling disagreeing", map[string]string{"llama3": "a", "Llama3:latest": "b"},
			[]string{`tenants[0].slo_by_model["Llama3:latest"]: "Llama3:latest" is the same model as "llama3" to Ollama`}},
		{"SGLang's base:adapter of a model", map[string]string{"base: big": "b", "x:qwen": "c"},
			[]string{`tenants[0].slo_by_model["base: big"]: "base: big" names LoRA adapter "big" as SGLang reads a model (base:adapter), and "big" is model "big": requests on chat and completions that give this name are held by "big"'s limits`}},
		{"not a name", map[string]string{"": "a", "x\ny": "a"},
			[]string{`tenants[0].slo_by_model[""]: want a model name`, `tenants[0].slo_by_model["x\ny"]: want a model name`}},
	} {
		err := ValidateTenants([]TenantConfig{{Name: "acme", Models: models, ModelAliases: aliases, SLOByModel: c.byMod}})
		var got []string
		if err != nil {
			got = strings.Split(err.Error(), "\n")
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], c.want[i]) {
				t.Errorf("%s:\n%s\nwant\n%s", c.name, got[i], c.want[i])
			}
		}
	}
}

// Matching a request's model to a configured one, by each rule, for a
// model the tenant does not list (the Ollama form is computed, then not
// found), and for a request that names none (the default model).
func BenchmarkModelMatch(b *testing.B) {
	mn := modelNames{lim: map[string]Limits{"llama3": {TPM: 1}, "meta-llama/Llama-3.1-8B-Instruct": {RPM: 1}},
		aliases: map[string][]string{"meta-llama/Llama-3.1-8B-Instruct": {"llama-8b"}}, def: "llama3"}
	for _, c := range []struct {
		name, model string
		noModel     bool
	}{
		{"exact", "meta-llama/Llama-3.1-8B-Instruct", false}, {"alias", "llama-8b", false},
		{"ollama", "Llama3:latest", false}, {"unlisted", "qwen2.5:7b-instruct", false}, {"none", "", true},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				mn.resolve(c.model, c.noModel)
			}
		})
	}
}

// A request's LoRA adapter (Request.Adapter) holds it by the adapter's
// limits when the tenant lists the adapter as a model, ahead of its model;
// an adapter the tenant does not list leaves the request matched as
// without it. Where the engine may not read the adapter (AdapterUnsure:
// the OpenAI routes, which vLLM serves too), the adapter is matched only
// when the model matches none, so that it never takes a request off its
// model's limits. The decision, and a queued request's line, say that the
// adapter matched.
func TestAdapterMatchesItsModel(t *testing.T) {
	ten := tenant("acme", Limits{RPM: 6000})
	ten.Models = map[string]Limits{"base": {}, "lora-a": {}, "lora-b": {}}
	ten.ModelAliases = map[string][]string{"lora-b": {"b"}}
	ten.ModelDefault = map[string]bool{"base": true}
	ts := []TenantConfig{ten}
	cases := []struct {
		req     Request
		want    string
		byAdapt bool
	}{
		{Request{Adapter: "lora-a"}, "lora-a", true},
		{Request{Model: "base", Adapter: "lora-a"}, "lora-a", true},
		{Request{NoModel: true, Adapter: "lora-a"}, "lora-a", true},
		{Request{Model: "other", Adapter: "b"}, "lora-b", true}, // an alias
		{Request{Model: "base", Adapter: "unlisted"}, "base", false},
		{Request{NoModel: true, Adapter: "unlisted"}, "base", false},
		{Request{Model: "other", Adapter: "unlisted"}, "", false},
		{Request{Model: "base:lora-a", Adapter: "lora-a", AdapterUnsure: true}, "lora-a", true},
		{Request{Model: "base", Adapter: "lora-a", AdapterUnsure: true}, "base", false},
		{Request{NoModel: true, Adapter: "lora-a", AdapterUnsure: true}, "base", false},
		{Request{Model: "x:unlisted", Adapter: "unlisted", AdapterUnsure: true}, "", false},
		{Request{Model: "base", Adapter: "\xff\xfe"}, "base", false}, // not UTF-8: matches none
	}
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		l := mk(ts)
		for _, c := range cases {
			c.req.Tenant, c.req.EstTokens = "acme", 1
			tk, d := admit(t, l, t0, c.req)
			if !d.Allowed || d.Model != c.want || d.ByAdapter != c.byAdapt {
				t.Errorf("%+v: allowed %v, model %q by adapter %v; want %q, %v", c.req, d.Allowed, d.Model, d.ByAdapter, c.want, c.byAdapt)
			}
			reconcile(t, l, t0, tk, 0)
			if m, ok := l.(modelMatcher); ok {
				if got, by, known := m.matchModel(&c.req); !known || got != c.want || by != c.byAdapt {
					t.Errorf("%+v: line of %q by adapter %v; want %q, %v", c.req, got, by, c.want, c.byAdapt)
				}
			}
		}
	})
}

// A merge key (<<) in a tenant, its limits or keys is refused as one, not
// as an unknown field "<<" whose list of known fields hid what was wrong;
// an alias of the whole mapping is read.
func TestTenantMergeKeySaysSo(t *testing.T) {
	for _, src := range []string{
		"- name: a\n  limits: &l {rpm: 1}\n- name: b\n  limits: {<<: *l, tpm: 5}\n",
		"- name: a\n  limits: &l {rpm: 1}\n- name: b\n  keys: [{id: k, limits: {<<: *l}}]\n",
		"- &t {name: a, slo: x}\n- {<<: *t, name: b}\n",
	} {
		var ts []TenantConfig
		err := yaml.Unmarshal([]byte(src), &ts)
		if err == nil || !strings.Contains(err.Error(), "a YAML merge key (<<) is not supported here") || strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: %v, want the merge key named", src, err)
		}
	}
	var ts []TenantConfig
	if err := yaml.Unmarshal([]byte("- name: a\n  limits: &l {rpm: 1}\n- name: b\n  limits: *l\n"), &ts); err != nil || ts[1].Limits.RPM != 1 {
		t.Fatalf("an alias of whole limits: %v %+v", err, ts)
	}
}
