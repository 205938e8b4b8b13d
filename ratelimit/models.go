package ratelimit

import "strings"

// A request names its model as the client likes, and an engine may serve
// one model under several names: Ollama reads "llama3", "LLAMA3",
// "llama3:latest", "library/llama3" and "registry.ollama.ai/library/llama3"
// as the same model, and vLLM serves a model under every name given to
// --served-model-name. A tenant's per-model limits (TenantConfig.Models)
// must hold whichever of them it asks for. A request's model is matched to
// a configured one (modelNames.resolve):
//
//  1. a configured model's name, byte for byte;
//  2. else one of the names a configured model lists as its aliases, byte
//     for byte;
//  3. else, when the name is one Ollama accepts, the configured model one
//     of whose names (or aliases) Ollama reads as the same model: the
//     names' Ollama forms (ollamaForm) are equal. ValidateTenants refuses
//     two configured models that Ollama would read as the same, so there
//     is at most one.
//
// A request matched to no configured model has no model limits.
//
// A request that names no model (Request.NoModel: a metered route's body
// without "model", or with null, "" or a value that is not a string; and
// any request on TGI's native routes, whose engine reads no model) is
// matched to the tenant's default model (defaultModel), if it has one:
// vLLM runs its first served model for it, the one-model engines (a
// llama.cpp server with one model, TGI, SGLang) their model; Ollama and a
// llama.cpp router refuse it. Without a default such a request had no
// model limits at all, and a tenant held to a model's max_concurrency or
// tpm passed them by leaving its model out.
//
// A LoRA adapter the body names (Request.Adapter: TGI's adapter_id,
// SGLang's lora_path or "base:adapter" model) is matched as a model's
// name is, ahead of the model (or, where the engine may not read it,
// Request.AdapterUnsure, only when the model matches none): matched, the
// request is held by the adapter's limits; unmatched, as without it
// (resolveRequest).

// Ollama's default parts of a model's name (types/model/name.go).
const (
	ollamaHost      = "registry.ollama.ai"
	ollamaNamespace = "library"
	ollamaTag       = "latest"
)

// maxOllamaForm bounds ollamaForm's result: a host of 350 bytes, a
// namespace, a model and a tag of 80 each, their separators and the cloud
// mark.
const maxOllamaForm = 350 + 1 + 80 + 1 + 80 + 1 + 80 + len(cloudMark)

// cloudMark ends the Ollama form of a name Ollama sends to its cloud (a
// ":cloud" or "-cloud" suffix), a model other than the local one of the
// same name.
const cloudMark = " cloud"

// ollamaForm appends to dst the form in which Ollama compares the model
// name s, and reports whether Ollama accepts s at all (false: nothing is
// appended). As Ollama's server reads a request's model (the version of
// August 2026: internal/modelref's ParseRef, types/model's ParseName and
// IsValid, the server's getExistingName): spaces around it are dropped; a
// last ":local" suffix is dropped, and a ":cloud" one, or a tag's
// "-cloud" suffix, names the cloud's model; the name is split into host,
// namespace, model and tag (host/namespace/model:tag, from the right; a
// "scheme://" before the host is dropped), each missing part taking its
// default (registry.ollama.ai, library, latest), and each part must be
// 1 to 80 (the host: 350) ASCII letters, digits, '_', '-', '.' (not in a
// namespace) or ':' (only in a host), starting with a letter, a digit or
// '_'; parts are compared regardless of case. The form is the parts in
// lower case, host and namespace left out when they are the defaults.
// It allocates nothing when dst has room.
func ollamaForm(dst []byte, s string) ([]byte, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return dst, false
	}
	cloud := false
	tag, tagged := "", false
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		if found, c, t, hasTag := sourceSuffix(s[i+1:]); found {
			cloud = c
			// Ollama refuses a name with a second suffix under the first.
			next := t
			if s = s[:i]; hasTag {
				tag, tagged = t, true
			} else if j := strings.LastIndexByte(s, ':'); j >= 0 {
				next = s[j+1:]
			} else {
				next = ""
			}
			if found, _, _, _ := sourceSuffix(next); found {
				return dst, false
			}
		}
	}
	if !tagged {
		if c, sl := strings.LastIndexByte(s, ':'), strings.LastIndexByte(s, '/'); c > sl {
			s, tag, tagged = s[:c], s[c+1:], true
		}
	}
	if tagged && tag == "" {
		return dst, false // a promised part missing
	}
	host, ns, model := "", "", s
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s, model = s[:i], s[i+1:]
		ns = s
		if j := strings.LastIndexByte(s, '/'); j >= 0 {
			host, ns = s[:j], s[j+1:]
			if host == "" {
				return dst, false
			}
			if _, h, ok := strings.Cut(host, "://"); ok {
				host = h // "" takes the default
			}
		}
		if ns == "" {
			return dst, false
		}
	}
	if host == "" {
		host = ollamaHost
	}
	if ns == "" {
		ns = ollamaNamespace
	}
	if !tagged {
		tag = ollamaTag
	}
	if !ollamaPart(host, 350, ':') || !ollamaPart(ns, 80, 0) || !ollamaPart(model, 80, '.') || !ollamaPart(tag, 80, '.') {
		return dst, false
	}
	if !strings.EqualFold(host, ollamaHost) {
		dst = appendLower(dst, host)
		dst = append(dst, '/')
		dst = appendLower(dst, ns)
		dst = append(dst, '/')
	} else if !strings.EqualFold(ns, ollamaNamespace) {
		dst = appendLower(dst, ns)
		dst = append(dst, '/')
	}
	dst = appendLower(dst, model)
	dst = append(dst, ':')
	dst = appendLower(dst, tag)
	if cloud {
		dst = append(dst, cloudMark...)
	}
	return dst, true
}

// sourceSuffix reads what follows the last ':' of a model's name as
// Ollama's parseSourceSuffix does: found when, spaces around it dropped, it
// is "cloud" or "local" (in any case), or a tag (no '/') ending in "-cloud",
// cloud for the cloud's model; hasTag when the name keeps a tag, t (the
// tag without "-cloud").
func sourceSuffix(after string) (found, cloud bool, t string, hasTag bool) {
	raw := strings.TrimSpace(after)
	switch {
	case strings.EqualFold(raw, "cloud"):
		return true, true, "", false
	case strings.EqualFold(raw, "local"):
		return true, false, "", false
	case !strings.Contains(raw, "/") && len(raw) >= len("-cloud") && strings.EqualFold(raw[len(raw)-len("-cloud"):], "-cloud"):
		return true, true, raw[:len(raw)-len("-cloud")], true
	}
	return false, false, "", false
}

// ollamaPart reports whether s is a valid part of an Ollama name of at most
// max bytes: ASCII letters, digits, '_' and '-', with '.' allowed unless
// extra is 0, and extra (':' for a host) also allowed, the first byte a
// letter, a digit or '_'. A host may hold '.' and ':'.
func ollamaPart(s string, max int, extra byte) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_':
		case i == 0:
			return false
		case c == '-':
		case c == '.' && extra != 0:
		case c == ':' && extra == ':':
		default:
			return false
		}
	}
	return true
}

func appendLower(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// modelNames matches a request's model to one of a tenant's configured
// models (see the rule above).
type modelNames struct {
	lim     map[string]Limits   // TenantConfig.Models, only read
	aliases map[string][]string // TenantConfig.ModelAliases, only read
	def     string              // the default model (defaultModel); "" for none

	// Made at the first request that names no configured model byte for
	// byte, by then held under the tenant's mutex: a tenant that never
	// sends one (or lists no model) costs nothing. byAlias maps an alias
	// to its model; byForm an Ollama form to the model one of whose names
	// has it ("" when two models share it: a configuration that
	// ValidateTenants refuses).
	made    bool
	byAlias map[string]string
	byForm  map[string]string
}

// resolve returns the configured model that a request for model is
// matched to, or "" for none; a request that names no model (noModel, and
// model "") is matched to the default model, as is one for a model that
// matches none under noModel (an adapter the engine runs when it has it,
// its one model otherwise: Request.NoModel). The caller holds the
// tenant's mutex. It allocates nothing when model is a configured model's
// name or none, nor, after the tenant's first request of another name,
// when it is another.
func (mn *modelNames) resolve(model string, noModel bool) string {
	if m := mn.match(model); m != "" || !noModel {
		return m
	}
	return mn.def
}

// resolveRequest returns the configured model req is matched to ("" for
// none), and whether by its Adapter: the adapter's model when it matches
// one (Request.AdapterUnsure: only when the model matches none), else
// resolve's. The caller holds the tenant's mutex; it allocates as resolve
// does.
func (mn *modelNames) resolveRequest(req *Request) (string, bool) {
	if req.Adapter != "" && !req.AdapterUnsure {
		if m := mn.match(req.Adapter); m != "" {
			return m, true
		}
	}
	m := mn.resolve(req.Model, req.NoModel)
	if m == "" && req.Adapter != "" && req.AdapterUnsure {
		if m = mn.match(req.Adapter); m != "" {
			return m, true
		}
	}
	return m, false
}

// match returns the configured model a name names (itself, an alias, or as
// Ollama reads it), or "".
func (mn *modelNames) match(model string) string {
	if model == "" {
		return ""
	}
	if _, ok := mn.lim[model]; ok {
		return model
	}
	if len(mn.lim) == 0 {
		return ""
	}
	if !mn.made {
		mn.make()
	}
	if m, ok := mn.byAlias[model]; ok {
		return m
	}
	if mn.byForm == nil {
		return ""
	}
	var buf [maxOllamaForm]byte
	form, ok := ollamaForm(buf[:0], model)
	if !ok {
		return ""
	}
	return mn.byForm[string(form)]
}

func (mn *modelNames) make() {
	mn.made = true
	mn.byForm = make(map[string]string, len(mn.lim))
	add := func(name, model string) {
		form, ok := ollamaForm(nil, name)
		if !ok {
			return
		}
		if prev, dup := mn.byForm[string(form)]; dup && prev != model {
			model = ""
		}
		mn.byForm[string(form)] = model
	}
	for m := range mn.lim {
		add(m, m)
	}
	for m, as := range mn.aliases {
		if _, ok := mn.lim[m]; !ok {
			continue
		}
		for _, a := range as {
			if _, ok := mn.lim[a]; ok {
				continue // a configured name is its own model
			}
			if mn.byAlias == nil {
				mn.byAlias = make(map[string]string)
			}
			if prev, dup := mn.byAlias[a]; dup && prev != m {
				mn.byAlias[a] = ""
			} else {
				mn.byAlias[a] = m
			}
			add(a, m)
		}
	}
}

// defaultModel returns the tenant's default model, whose limits hold a
// request that names no model, or "" for none: the model whose
// ModelDefault is true; with none, the tenant's only model, unless its
// ModelDefault says false. (Of two that say true, which ValidateTenants
// refuses, the first by name.)
//
// Why the only model is the default: a tenant held to one model's limits
// would otherwise pass them by leaving the model out, on vLLM (which runs
// its first served model) and on every one-model engine. Where that model
// is not what such a request runs (a LoRA adapter's limits on vLLM, whose
// unnamed requests run the base model), it holds more than it should,
// never less: limits only tighten. default: false says so.
func (t *TenantConfig) defaultModel() string {
	def := ""
	for m, yes := range t.ModelDefault {
		if _, ok := t.Models[m]; ok && yes && (def == "" || m < def) {
			def = m
		}
	}
	if def == "" && len(t.Models) == 1 {
		for m := range t.Models {
			if yes, said := t.ModelDefault[m]; yes || !said {
				def = m
			}
		}
	}
	return def
}

// modelMatcher is a limiter that matches a request's model to a tenant's
// configured one: the Gate's queue puts requests held by the same model's
// limits in one line, whichever name they give it (or none).
type modelMatcher interface {
	// matchModel returns the configured model of req's tenant that req
	// is matched to ("" for none), and whether by its adapter; known is
	// false when the tenant is unknown.
	matchModel(req *Request) (model string, byAdapter, known bool)
}

func (l *Local) matchModel(req *Request) (string, bool, bool) {
	lt := l.state.Load().tenants[req.Tenant]
	if lt == nil {
		return "", false, false
	}
	lt.mu.Lock()
	defer lt.mu.Unlock()
	m, by := lt.names.resolveRequest(req)
	return m, by, true
}

func (r *Redis) matchModel(req *Request) (string, bool, bool) {
	rt := r.state.Load().tenants[req.Tenant]
	if rt == nil {
		return "", false, false
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	m, by := rt.names.resolveRequest(req)
	return m, by, true
}
