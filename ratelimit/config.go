package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/keyshape"
	"github.com/goodput/goodput/internal/urlredact"
	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"
)

// TenantConfig is one entry of the `tenants:` list.
//
//	tenants:
//	  - name: acme
//	    slo: interactive
//	    keys:
//	      - id: acme-prod
//	        sha256: "<64 hex>"
//	        limits: {rpm: 100}          # optional, per key
//	    limits: {rpm: 600, tpm: 200000, max_concurrency: 32, burst: 20}
//	    models: {llama-70b: {tpm: 50000, aliases: [llama-70b-instruct], default: true}}
//	    upstream: {api_key_env: ACME_UPSTREAM_KEY}
//
// Limits nest: a request is admitted only when its tenant's limits, its key's
// limits (if the key has any) and the limits of the model it asks for (if the
// tenant lists that model, under that name, as an alias, or as Ollama reads
// names: see models.go; a request that names no model, that of the tenant's
// default model) all allow it. A model or key entry therefore only ever
// tightens the tenant's limits; it never grants capacity beyond them.
type TenantConfig struct {
	// Name identifies the tenant in metrics, logs and Redis keys. Required;
	// letters, digits, '.', '_' and '-', at most 64 characters, unique.
	Name string `yaml:"name"`
	// SLO names the tenant's SLO class (used by the slo package). Empty means
	// the default class.
	SLO string `yaml:"slo"`
	// SLOByModel overrides SLO for requests to a model: the name a request
	// gives, byte for byte, else the configured model (of Models) its
	// limits match it to, which for a request that names no model is the
	// default model. Each key is a model's name: another name of a
	// configured model (an alias, a spelling Ollama reads as it) is
	// refused unless the model's own entry gives the same class. Nil means
	// no override.
	SLOByModel map[string]string `yaml:"slo_by_model"`
	// SLOByShape overrides SLO for a shape of work (chat, rag, longgen).
	// Nil means no override; a per-model override wins over it.
	SLOByShape map[string]string `yaml:"slo_by_shape"`
	// Keys are the gateway keys that authenticate as this tenant. An empty
	// list means no key maps to the tenant (it is effectively disabled).
	Keys []KeyConfig `yaml:"keys"`
	// Limits apply to all of the tenant's traffic. The zero value means no
	// limit at all.
	Limits Limits `yaml:"limits"`
	// Models adds limits on the tenant's traffic to one model, on top of
	// Limits. Nil means none. A request's model is matched to a configured
	// one by name, then by its aliases (ModelAliases), then as Ollama
	// compares names (see models.go).
	Models map[string]Limits `yaml:"models"`
	// ModelAliases lists, for a model of Models, the other names its
	// requests may give it (the names vLLM serves it under, with
	// --served-model-name): their requests count against its limits. In
	// YAML, each model's `aliases:` list, beside its limits. Nil means
	// none.
	ModelAliases map[string][]string `yaml:"-"`
	// ModelDefault says, for a model of Models, whether it is the
	// tenant's default model: the one whose limits hold a request that
	// names no model (vLLM runs its first served model for it). In YAML,
	// each model's `default: true` (or false), beside its limits. At most
	// one model is true. Nil (or no entry) means: a tenant's only model is
	// its default unless it says false; of two or more, none is unless
	// one says true (see defaultModel).
	ModelDefault map[string]bool `yaml:"-"`
	// Upstream is the credential sent upstream for this tenant's requests in
	// place of the gateway key. The zero value sends no credential.
	Upstream UpstreamConfig `yaml:"upstream"`
}

// KeyConfig is one gateway key of a tenant. The key itself is never stored:
// only its SHA-256 digest.
type KeyConfig struct {
	// ID names the key in logs and metrics (never the key itself). Required;
	// same character set as a tenant name; unique across all tenants.
	ID string `yaml:"id"`
	// SHA256 is the hex SHA-256 digest of the full key string (`goodput keys` prints it).
	// Required: 64 hex characters, unique across all tenants.
	SHA256 string `yaml:"sha256"`
	// Limits apply to requests made with this key, on top of the tenant's.
	// The zero value adds no limit.
	Limits Limits `yaml:"limits"`
}

// Limits are the limits of one level (tenant, key or model). Every field's
// zero value means "no limit of this kind at this level".
type Limits struct {
	// RPM is the number of requests admitted per minute, as a steady rate
	// (a token bucket refilled at RPM/60 per second). 0 = unlimited.
	RPM int64 `yaml:"rpm"`
	// TPM is the number of tokens (input + output) admitted per minute. The
	// bucket holds one minute's worth, so a single request may use up to TPM
	// tokens; a request estimated above TPM is rejected as too large.
	// 0 = unlimited.
	TPM int64 `yaml:"tpm"`
	// MaxConcurrency is the number of requests in flight at once (admitted
	// and not yet reconciled). 0 = unlimited.
	MaxConcurrency int64 `yaml:"max_concurrency"`
	// Burst is how many requests may be admitted back to back before the RPM
	// rate applies (the capacity of the request bucket). It needs RPM.
	// 0 = RPM, i.e. the whole minute's allowance may be used at once.
	Burst int64 `yaml:"burst"`
	// OnOverrun says what happens to a stream that outgrows the tokens it
	// was charged at admission (its output passed max_tokens or the default
	// allowance): "charge" lets it run and charges its tokens as it goes,
	// into debt if need be; "cut" charges them only while every token limit
	// still has them, and otherwise ends the stream. Tenant level only.
	// Empty = "charge".
	OnOverrun string `yaml:"on_overrun"`
}

// On-overrun policies (Limits.OnOverrun).
const (
	overrunCharge = "charge"
	OverrunCut    = "cut"
)

// IsZero reports whether no limit is set.
func (l Limits) IsZero() bool { return l == Limits{} }

// requestCapacity is the size of the request bucket: Burst, or RPM if unset.
func (l Limits) requestCapacity() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.RPM
}

// UpstreamConfig is the credential the gateway sends upstream for a tenant.
type UpstreamConfig struct {
	// APIKey is the upstream credential written in the file. Empty = none.
	APIKey string `yaml:"api_key"`
	// APIKeyEnv names an environment variable that holds the upstream
	// credential, read when the configuration is loaded or reloaded. Empty =
	// none. At most one of APIKey and APIKeyEnv may be set. Either is
	// trimmed of white space as it is loaded, and refused with a control
	// character inside, or when nothing is left (package identity): it is
	// sent in a header.
	APIKeyEnv string `yaml:"api_key_env"`
}

// Backend names.
const (
	BackendLocal = "local"
	backendRedis = "redis"
)

// Backend error policies.
const (
	FailOpen   = "fail_open"
	FailClosed = "fail_closed"
)

// Defaults applied by BackendConfig.withDefaults.
const (
	// defaultRedisTimeout: decisions on a loaded 2-CPU machine took up to
	// 152ms (p99.9 90ms, p99 7ms) with an idle gateway, more when the
	// gateway's own CPUs are saturated (BenchmarkRedisDecisionUnderCPULoad);
	// 50ms failed calls that Redis had answered. A hung Redis costs a
	// decision at most this, and only until the breaker opens.
	defaultRedisTimeout = 250 * time.Millisecond
	// maxRedisTimeout bounds the timeout: a request's record follows the
	// release of its limits, which waits for Redis up to the timeout, and
	// so does every admission while a hung Redis has not opened the
	// breaker. Ten seconds is 40 times the default and covers the three
	// round trips of a call on a new connection (see RedisConfig.Timeout)
	// to a Redis a few seconds away: a Redis slower than that is down.
	maxRedisTimeout  = 10 * time.Second
	defaultKeyPrefix = "goodput"
	defaultLeaseTTL  = 5 * time.Second
	// DefaultMaxTokens is the output allowance charged at admission for a
	// request that sets no max_tokens (see EstimateRequest).
	DefaultMaxTokens = 1024
)

// BackendConfig is the `ratelimit:` section.
//
//	ratelimit:
//	  backend: redis
//	  redis: {url: "redis://127.0.0.1:6379/0", timeout: 250ms}
//	  on_backend_error: fail_open
//	  max_queue_wait: 2s
//	  default_max_tokens: 1024
type BackendConfig struct {
	// Backend is "local" (one replica, in-process buckets) or "redis" (limits
	// shared by every replica using the same Redis). Empty = "local".
	Backend string `yaml:"backend"`
	// Redis configures the redis backend; ignored by the local one.
	Redis RedisConfig `yaml:"redis"`
	// OnBackendError says what happens to a request when the backend fails:
	// "fail_open" admits it (and counts the error), "fail_closed" rejects it
	// with 503. Empty = "fail_open".
	OnBackendError string `yaml:"on_backend_error"`
	// MaxQueueWait is how long a request over a rate or concurrency limit
	// may wait for capacity instead of being rejected. 0 = no waiting.
	MaxQueueWait cfgtypes.Duration `yaml:"max_queue_wait"`
	// DefaultMaxTokens is the output allowance charged at admission when a
	// request does not set max_tokens, lowered as far as needed for the
	// request to fit its tightest tpm (see EstimateRequest); a stream that
	// outgrows it is charged as it goes (Limits.OnOverrun). 0 = 1024.
	DefaultMaxTokens int64 `yaml:"default_max_tokens"`
}

// RedisConfig configures the Redis backend.
type RedisConfig struct {
	// URL is the Redis URL (redis:// or rediss://, with an optional /db).
	// Required with backend "redis".
	URL string `yaml:"url"`
	// Timeout bounds every call to Redis, connecting included; a dead Redis
	// adds at most this to a request, and to the wait of its record for the
	// release of its limits. 0 = 250ms; at most 10s.
	Timeout cfgtypes.Duration `yaml:"timeout"`
	// Cluster makes URL a Redis Cluster seed URL (extra nodes as
	// ?addr=host:port). false = a single Redis server.
	Cluster bool `yaml:"cluster"`
	// KeyPrefix starts every key this gateway writes. Empty = "goodput".
	KeyPrefix string `yaml:"key_prefix"`
	// LeaseTTL is how long a concurrency slot survives in Redis without being
	// renewed; each replica's heartbeat renews its live slots every
	// LeaseTTL/5, so a crashed replica's slots free themselves after at most
	// LeaseTTL. 0 = 5s.
	LeaseTTL cfgtypes.Duration `yaml:"lease_ttl"`
}

// withDefaults returns c with every zero field that has a default filled in.
func (c BackendConfig) withDefaults() BackendConfig {
	if c.Backend == "" {
		c.Backend = BackendLocal
	}
	if c.OnBackendError == "" {
		c.OnBackendError = FailOpen
	}
	if c.Redis.Timeout == 0 {
		c.Redis.Timeout = cfgtypes.Duration(defaultRedisTimeout)
	}
	if c.Redis.KeyPrefix == "" {
		c.Redis.KeyPrefix = defaultKeyPrefix
	}
	if c.Redis.LeaseTTL == 0 {
		c.Redis.LeaseTTL = cfgtypes.Duration(defaultLeaseTTL)
	}
	if c.DefaultMaxTokens == 0 {
		c.DefaultMaxTokens = DefaultMaxTokens
	}
	return c
}

// Validate checks the section; error messages name the field path, such as
// "ratelimit.redis.url: ...". All problems are reported, joined.
func (c *BackendConfig) Validate() error {
	var errs []error
	add := func(path, format string, a ...any) {
		errs = append(errs, fmt.Errorf("ratelimit.%s: %s", path, fmt.Sprintf(format, a...)))
	}
	switch c.Backend {
	case "", BackendLocal:
	case backendRedis:
		if c.Redis.URL == "" {
			add("redis.url", "required with backend %q", backendRedis)
		} else if c.Redis.Cluster {
			if _, err := redis.ParseClusterURL(c.Redis.URL); err != nil {
				add("redis.url", "%v", urlredact.Err(c.Redis.URL, err))
			}
		} else if _, err := redis.ParseURL(c.Redis.URL); err != nil {
			add("redis.url", "%v", urlredact.Err(c.Redis.URL, err))
		}
	default:
		add("backend", "%q is not a backend (want %q or %q)", c.Backend, BackendLocal, backendRedis)
	}
	switch c.OnBackendError {
	case "", FailOpen, FailClosed:
	default:
		add("on_backend_error", "%q is not a policy (want %q or %q)", c.OnBackendError, FailOpen, FailClosed)
	}
	switch {
	case c.DefaultMaxTokens < 0:
		add("default_max_tokens", "must not be negative")
	case c.DefaultMaxTokens > maxTPM:
		add("default_max_tokens", "%d is more than any tpm holds (at most %d)", c.DefaultMaxTokens, int64(maxTPM))
	}
	if p := c.Redis.KeyPrefix; p != "" && !validName(p) {
		add("redis.key_prefix", "%q: want letters, digits, '.', '_' or '-' (at most 64)", p)
	}
	if to := c.Redis.Timeout.D(); to > maxRedisTimeout {
		add("redis.timeout", "%v is too long (at most %v)", to, maxRedisTimeout)
	}
	if ttl := c.Redis.LeaseTTL.D(); ttl != 0 && ttl < time.Second {
		add("redis.lease_ttl", "%v is too short (want at least 1s)", ttl)
	}
	return errors.Join(errs...)
}

// Upper bounds that keep every computation far from overflow.
const (
	maxRPM         = 1_000_000_000
	maxTPM         = 1_000_000_000_000
	maxConcurrency = 10_000_000
)

// keyShaped refuses a tenant name or key id shaped like a gateway key (an
// operator who pasted the key where its name goes): names and ids are
// written to the request log, metrics and errors, and the key with them.
// The message does not quote what it refuses.
const keyShaped = "shaped like a gateway key (" + keyshape.Prefix + " and 16 or more of its characters), and names and ids are written to the request log: give it a name instead (not shown here)"

// isAKey refuses a tenant name or key id that is one of the configured
// keys (its SHA-256 is a key's): a key of the operator's own form, which no
// shape tells from a name, pasted where the name goes.
const isAKey = "is one of the gateway keys configured (its SHA-256 is a key's), and names and ids are written to the request log and the metrics: give it a name instead (not shown here)"

// modelKeyShaped refuses a model name (a model, an alias, a slo_by_model
// entry) that holds a whole gateway key (keyshape.HoldsWhole: a model
// "acme/gp-finetuned-support-v2" is a name, as the requests' check takes
// it): model names are written to the metrics' labels and the request log
// (found by a new user's probe: one passed config check).
const modelKeyShaped = "a model name that holds a whole gateway key (" + keyshape.Prefix + " and 43 or more of its characters): model names are written to the metrics and the request log (not shown here)"

// reserved explains the tenant names the gateway's tenant label values
// take (export.Other, this package's otherTenant): a tenant so named would
// share its series with requests it does not own. ("none" is a model
// label's value only: a tenant may take it.)
var reserved = map[string]string{
	otherTenant: "the metrics count under it what no tenant's label holds (requests without a valid key, tenants past the label limit)",
}

// ValidateTenants checks the tenants list. Messages name the field path, for
// example "tenants[1].keys[0].sha256: want 64 hex characters". Tenant names,
// key ids and key hashes must be unique. The problems are reported joined,
// at most cfgtypes.MaxErrors of them and the count of the others.
func ValidateTenants(tenants []TenantConfig) error {
	var errs cfgtypes.Errors
	add := errs.Addf
	names := map[string]int{}
	ids := map[string]keyAt{}
	hashes := map[string]keyAt{}
	// The keys' hashes, to refuse a name or an id that is a key itself (an
	// operator's own form, which no shape tells apart from a name).
	keyHashes := map[string]bool{}
	for i := range tenants {
		for _, k := range tenants[i].Keys {
			keyHashes[strings.ToLower(k.SHA256)] = true
		}
	}
	isKey := func(v string) bool {
		sum := sha256.Sum256([]byte(v))
		return keyHashes[hex.EncodeToString(sum[:])]
	}
	for i := range tenants {
		t := &tenants[i]
		p := fmt.Sprintf("tenants[%d]", i)
		switch {
		case t.Name == "":
			add(p+".name", "required")
		case keyshape.Holds([]byte(t.Name)):
			add(p+".name", keyShaped)
		case isKey(t.Name):
			add(p+".name", isAKey)
		case reserved[t.Name] != "":
			add(p+".name", "%q is reserved: %s; choose another name", t.Name, reserved[t.Name])
		case !validName(t.Name):
			add(p+".name", "%q: want letters, digits, '.', '_' or '-' (at most 64, not starting with a punctuation mark)", t.Name)
		default:
			if j, dup := names[t.Name]; dup {
				add(p+".name", "%q is already the name of tenants[%d]", t.Name, j)
			} else {
				names[t.Name] = i
			}
		}
		errs.Add(errors.Join(t.Limits.validate(p + ".limits")...))
		switch t.Limits.OnOverrun {
		case "", overrunCharge, OverrunCut:
		default:
			add(p+".limits.on_overrun", "%q is not a policy (want %q or %q)", t.Limits.OnOverrun, overrunCharge, OverrunCut)
		}
		for j := range t.Keys {
			k := &t.Keys[j]
			kp := fmt.Sprintf("%s.keys[%d]", p, j)
			switch {
			case k.ID == "":
				add(kp+".id", "required")
			case keyshape.Holds([]byte(k.ID)):
				add(kp+".id", keyShaped)
			case isKey(k.ID):
				add(kp+".id", isAKey)
			case !validName(k.ID):
				add(kp+".id", "%q: want letters, digits, '.', '_' or '-' (at most 64, not starting with a punctuation mark)", k.ID)
			default:
				if prev, dup := ids[k.ID]; dup {
					add(kp+".id", "%q is already used by %s", k.ID, prev.describe(tenants))
				} else {
					ids[k.ID] = keyAt{i, j}
				}
			}
			if !isHex64(k.SHA256) {
				add(kp+".sha256", "want 64 hex characters (the SHA-256 of the key), got %d characters", len(k.SHA256))
			} else {
				h := strings.ToLower(k.SHA256)
				if prev, dup := hashes[h]; dup {
					add(kp+".sha256", "the same key is already configured as %s", prev.describe(tenants))
				} else {
					hashes[h] = keyAt{i, j}
				}
			}
			errs.Add(errors.Join(k.Limits.validate(kp + ".limits")...))
			if k.Limits.OnOverrun != "" {
				add(kp+".limits.on_overrun", "a tenant's policy: set it in %s.limits", p)
			}
		}
		for _, m := range slices.Sorted(maps.Keys(t.Models)) {
			if keyshape.HoldsWhole([]byte(m)) {
				add(p+".models", modelKeyShaped)
				continue
			}
			mp := fmt.Sprintf("%s.models[%q]", p, m)
			if !validModelName(m) {
				add(mp, "want a model name of 1 to 256 printable characters")
			}
			errs.Add(errors.Join(t.Models[m].validate(mp)...))
			if t.Models[m].OnOverrun != "" {
				add(mp+".on_overrun", "a tenant's policy: set it in %s.limits", p)
			}
		}
		validateModelNames(&errs, p, t)
		validateSLOModels(&errs, p, t)
		if t.Upstream.APIKey != "" && t.Upstream.APIKeyEnv != "" {
			add(p+".upstream", "set api_key or api_key_env, not both")
		}
		if e := t.Upstream.APIKeyEnv; e != "" && !validEnvName(e) {
			add(p+".upstream.api_key_env", "%q is not an environment variable name", e)
		}
		if err := CheckUpstreamKey(t.Upstream.APIKey); err != nil {
			// Written in the file: refused here, so that config check
			// (which runs this and not the keyring) refuses what serve
			// and a reload refuse, with the line. One from a variable
			// is checked when it is read (package identity).
			add(p+".upstream.api_key", "%v", err)
		}
	}
	return errs.Err()
}

func validModelName(m string) bool {
	return m != "" && len(m) <= 256 && !strings.ContainsFunc(m, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// validateModelNames checks the aliases and the default of the tenant's
// models, and that each request's model is matched to at most one
// configured model (see models.go): no alias is another name of the
// tenant's models (a model's name or another model's alias), no two
// models have names (or aliases) that Ollama reads as the same model, and
// at most one model is the default.
func validateModelNames(errs *cfgtypes.Errors, p string, t *TenantConfig) {
	add := errs.Addf
	// Every name, the models' first (sorted), then their aliases.
	type named struct{ name, model, path string }
	var names []named
	for _, m := range slices.Sorted(maps.Keys(t.Models)) {
		names = append(names, named{m, m, fmt.Sprintf("%s.models[%q]", p, m)})
	}
	for _, m := range slices.Sorted(maps.Keys(t.ModelAliases)) {
		mp := fmt.Sprintf("%s.models[%q].aliases", p, m)
		if _, ok := t.Models[m]; !ok {
			add(mp, "%q is not one of the tenant's models", m)
			continue
		}
		for j, a := range t.ModelAliases[m] {
			ap := fmt.Sprintf("%s[%d]", mp, j)
			if keyshape.HoldsWhole([]byte(a)) {
				add(ap, modelKeyShaped)
				continue
			}
			if !validModelName(a) {
				add(ap, "want a model name of 1 to 256 printable characters")
				continue
			}
			names = append(names, named{a, m, ap})
		}
	}
	// The default model: at most one says true (a request that names no
	// model would count against one of them only). Each that does is
	// named, so that the check gives every line.
	var defs []string
	for _, m := range slices.Sorted(maps.Keys(t.ModelDefault)) {
		if _, ok := t.Models[m]; !ok {
			add(fmt.Sprintf("%s.models[%q].default", p, m), "%q is not one of the tenant's models", m)
		} else if t.ModelDefault[m] {
			defs = append(defs, m)
		}
	}
	if len(defs) > 1 {
		// Each is named with a few of the others: all of them, in each
		// of their errors, made 5,000 models' errors 220 MB.
		quoted := make([]string, 0, maxDefaultsNamed+1)
		for _, m := range defs[:min(len(defs), maxDefaultsNamed)] {
			quoted = append(quoted, strconv.Quote(m))
		}
		if len(defs) > maxDefaultsNamed {
			quoted = append(quoted, "…")
		}
		for _, m := range defs {
			add(fmt.Sprintf("%s.models[%q].default", p, m), "%d models say default: true (%s): a request that names no model counts against one model's limits only; keep it on one", len(defs), strings.Join(quoted, ", "))
		}
	}
	exact := make(map[string]named, len(names))
	forms := make(map[string]named, len(names))
	for _, n := range names {
		if prev, dup := exact[n.name]; dup {
			if prev.model == n.model {
				add(n.path, "%q is already a name of the model (%s)", n.name, prev.path)
			} else {
				add(n.path, "%q is already a name of model %q (%s): a request for it would count against one model's limits only", n.name, prev.model, prev.path)
			}
			continue
		}
		exact[n.name] = n
		form, ok := ollamaForm(nil, n.name)
		if !ok {
			continue
		}
		if prev, dup := forms[string(form)]; dup && prev.model != n.model {
			add(n.path, "%q and %q (%s, of model %q) are the same model to Ollama (which reads names regardless of case, a missing tag as latest): a request for it would count against one of the two models' limits only; keep one (a request for the other is matched to it)", n.name, prev.name, prev.path, prev.model)
			continue
		}
		forms[string(form)] = n
	}
}

// maxDefaultsNamed is how many of the models that say default: true an
// error about one of them names.
const maxDefaultsNamed = 8

// validateSLOModels checks the keys of the tenant's slo_by_model: each
// is a model name, and none is another name of a configured model (one of
// its aliases, or a spelling Ollama reads as it) unless the model's own
// entry gives the same class. The judge finds a request's class by the
// name it gave, then by the model its limits matched: an entry under
// another name would judge the requests that give that name only, and the
// model's others (its own name, none for the default model) by another
// class, so that the model's attainment would depend on its clients'
// spelling.
func validateSLOModels(errs *cfgtypes.Errors, p string, t *TenantConfig) {
	names := modelNames{lim: t.Models, aliases: t.ModelAliases}
	for _, m := range slices.Sorted(maps.Keys(t.SLOByModel)) {
		if keyshape.HoldsWhole([]byte(m)) {
			errs.Add(fmt.Errorf("%s.slo_by_model: %s", p, modelKeyShaped))
			continue
		}
		mp := fmt.Sprintf("%s.slo_by_model[%q]", p, m)
		if !validModelName(m) {
			errs.Add(fmt.Errorf("%s: want a model name of 1 to 256 printable characters", mp))
			continue
		}
		model := names.resolve(m, false)
		if model == "" {
			// SGLang's "base:adapter" (proxy's sglangAdapter): a request
			// so named on chat and completions, when the name matches no
			// model, is held and judged by the adapter's model, never by
			// this entry (on /generate, where SGLang reads no adapter from
			// a model, by it alone).
			if _, a, ok := strings.Cut(m, ":"); ok {
				if am := names.match(strings.TrimSpace(a)); am != "" {
					errs.Add(fmt.Errorf("%s: %q names LoRA adapter %q as SGLang reads a model (base:adapter), and %q is model %q: requests on chat and completions that give this name are held by %q's limits and judged by its class, never by this entry; write it under %q", mp, m, strings.TrimSpace(a), strings.TrimSpace(a), am, am, am))
				}
			}
			continue
		}
		if model == m {
			continue
		}
		class := t.SLOByModel[m]
		how := fmt.Sprintf("an alias of model %q", model)
		if !slices.Contains(t.ModelAliases[model], m) {
			how = fmt.Sprintf("the same model as %q to Ollama (which reads names regardless of case, a missing tag as latest)", model)
		}
		switch own, ok := t.SLOByModel[model]; {
		case !ok:
			errs.Add(fmt.Errorf("%s: %q is %s: its class %q would judge only the requests that give this name, and the model's others (under its name, other names, or none when it is the default model) by another; write the entry under the model's name, %q", mp, m, how, class, model))
		case own != class:
			errs.Add(fmt.Errorf("%s: %q is %s, whose entry (%s.slo_by_model[%q]) says %q: the model's requests would be judged by %q or %q depending on the name they give; keep the model's entry only", mp, m, how, p, model, own, class, own))
		}
	}
}

// keyAt is where a key is in the tenants list.
type keyAt struct{ tenant, key int }

// describe names the key for an error about another one: its path, and
// its tenant's name and its id when they are valid ones, so that the first
// of a duplicate pair can be found by name in a file of 100,000 keys (the
// path alone counts entries); a name or id shaped like a key is not shown.
func (at keyAt) describe(tenants []TenantConfig) string {
	p := fmt.Sprintf("tenants[%d].keys[%d]", at.tenant, at.key)
	t := &tenants[at.tenant]
	k := &t.Keys[at.key]
	if validName(t.Name) && !keyshape.Holds([]byte(t.Name)) && validName(k.ID) && !keyshape.Holds([]byte(k.ID)) {
		p += fmt.Sprintf(" (tenant %s, id %s)", t.Name, k.ID)
	}
	return p
}

func (l Limits) validate(path string) []error {
	var errs []error
	check := func(field string, v, max int64) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s.%s: must not be negative (0 means unlimited)", path, field))
		} else if v > max {
			errs = append(errs, fmt.Errorf("%s.%s: %d is above the maximum %d", path, field, v, max))
		}
	}
	check("rpm", l.RPM, maxRPM)
	check("tpm", l.TPM, maxTPM)
	check("max_concurrency", l.MaxConcurrency, maxConcurrency)
	check("burst", l.Burst, maxRPM)
	if l.Burst > 0 && l.RPM == 0 {
		errs = append(errs, fmt.Errorf("%s.burst: needs rpm (burst is the size of the request bucket)", path))
	}
	return errs
}

// ValidateTenantName checks a tenant's name (for the CLI's flags): an id,
// and not a name the gateway's labels take (reserved).
func ValidateTenantName(name string) error {
	if err := ValidateID(name); err != nil {
		return err
	}
	if why := reserved[name]; why != "" {
		return fmt.Errorf("%q is reserved: %s; choose another name", name, why)
	}
	return nil
}

// ValidateID checks a tenant name or key id (for the CLI's flags).
func ValidateID(id string) error {
	if keyshape.Holds([]byte(id)) {
		return errors.New(keyShaped)
	}
	if !validName(id) {
		return fmt.Errorf("%q: want 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", id)
	}
	return nil
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// CheckUpstreamKey checks an upstream credential as it was given (before
// the white space around it is dropped): it is sent in a header, so one
// that is only white space is no credential, and a control character
// inside it (a line break) would end the engine's Authorization field and
// start another. The error never quotes the credential. An empty one is
// none, and no error.
func CheckUpstreamKey(v string) error {
	if v == "" {
		return nil
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return errors.New("the upstream credential is only white space")
	}
	if strings.IndexFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0 {
		return errors.New("the upstream credential holds a control character (a line break?), which cannot be sent in an HTTP header")
	}
	return nil
}

func validEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// mergeKeyRefused says why a YAML merge key (<<) is refused in a tenant,
// its keys, limits and upstream, the ratelimit section and an SLO class:
// these are read field by field, and a merge key there was refused as an
// unknown field "<<", which named no merge key.
const mergeKeyRefused = "a YAML merge key (<<) is not supported here: write the fields out (an alias, *name, of the whole mapping is)"

// Strict decoding: a misspelt field (max_concurency) is an error with its line
// instead of a silently missing limit, whatever the caller's decoder settings.

func checkFields(n *yaml.Node, what string, known ...string) error {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: %s: want a mapping", n.Line, what)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if cfgtypes.IsMerge(k) {
			return fmt.Errorf("line %d: %s: %s", k.Line, what, mergeKeyRefused)
		}
		if !slices.Contains(known, k.Value) {
			return fmt.Errorf("line %d: %s: unknown field %q (known: %s)", k.Line, what, k.Value, strings.Join(known, ", "))
		}
	}
	return nil
}

// UnmarshalYAML decodes a tenant, rejecting unknown fields.
func (t *TenantConfig) UnmarshalYAML(n *yaml.Node) error {
	if err := checkFields(n, "tenant", "name", "slo", "slo_by_model", "slo_by_shape", "keys", "limits", "models", "upstream"); err != nil {
		return err
	}
	t.ModelAliases, t.ModelDefault = nil, nil
	if models := mappingValue(n, "models"); models != nil && models.Kind == yaml.MappingNode {
		// A model's aliases and default are read here, beside its limits:
		// Limits (shared with the tenant and its keys) has no such field.
		cp := *models
		cp.Content = slices.Clone(models.Content)
		for i := 0; i+1 < len(cp.Content); i += 2 {
			v := cp.Content[i+1]
			if v.Kind != yaml.MappingNode {
				continue
			}
			vc := *v
			vc.Content = nil
			// yaml refuses a member named twice in the limits it decodes;
			// these two are taken out first, so they are checked here.
			var seen [2]*yaml.Node // aliases, default
			for j := 0; j+1 < len(v.Content); j += 2 {
				k := v.Content[j]
				field := k.Value
				if field != "aliases" && field != "default" {
					vc.Content = append(vc.Content, v.Content[j], v.Content[j+1])
					continue
				}
				first := &seen[0]
				if field == "default" {
					first = &seen[1]
				}
				if *first != nil {
					return fmt.Errorf("line %d: mapping key %q already defined at line %d", k.Line, field, (*first).Line)
				}
				*first = k
				var name string
				if err := cp.Content[i].Decode(&name); err != nil {
					return err
				}
				if field == "default" {
					var def bool
					if err := v.Content[j+1].Decode(&def); err != nil {
						return err
					}
					if t.ModelDefault == nil {
						t.ModelDefault = make(map[string]bool)
					}
					t.ModelDefault[name] = def
					continue
				}
				var as []string
				if err := v.Content[j+1].Decode(&as); err != nil {
					return err
				}
				if t.ModelAliases == nil {
					t.ModelAliases = make(map[string][]string)
				}
				t.ModelAliases[name] = as
			}
			cp.Content[i+1] = &vc
		}
		nc := *n
		nc.Content = slices.Clone(n.Content)
		for i := 0; i+1 < len(nc.Content); i += 2 {
			if nc.Content[i+1] == models {
				nc.Content[i+1] = &cp
			}
		}
		n = &nc
	}
	aliases, def := t.ModelAliases, t.ModelDefault
	type plain TenantConfig
	if err := n.Decode((*plain)(t)); err != nil {
		return err
	}
	t.ModelAliases, t.ModelDefault = aliases, def
	return nil
}

// mappingValue returns the value of the member key of the mapping n, or
// nil.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// UnmarshalYAML decodes a key entry, rejecting unknown fields.
func (k *KeyConfig) UnmarshalYAML(n *yaml.Node) error {
	if err := checkFields(n, "key", "id", "sha256", "limits"); err != nil {
		return err
	}
	type plain KeyConfig
	return n.Decode((*plain)(k))
}

// UnmarshalYAML decodes limits, rejecting unknown fields.
func (l *Limits) UnmarshalYAML(n *yaml.Node) error {
	if err := checkFields(n, "limits", "rpm", "tpm", "max_concurrency", "burst", "on_overrun"); err != nil {
		return err
	}
	type plain Limits
	return n.Decode((*plain)(l))
}

// UnmarshalYAML decodes the upstream credential, rejecting unknown fields.
func (u *UpstreamConfig) UnmarshalYAML(n *yaml.Node) error {
	if err := checkFields(n, "upstream", "api_key", "api_key_env"); err != nil {
		return err
	}
	type plain UpstreamConfig
	return n.Decode((*plain)(u))
}

// UnmarshalYAML decodes the ratelimit section, rejecting unknown fields.
func (c *BackendConfig) UnmarshalYAML(n *yaml.Node) error {
	if err := checkFields(n, "ratelimit", "backend", "redis", "on_backend_error", "max_queue_wait", "default_max_tokens"); err != nil {
		return err
	}
	type plain BackendConfig
	return n.Decode((*plain)(c))
}

// UnmarshalYAML decodes the redis section, rejecting unknown fields.
func (c *RedisConfig) UnmarshalYAML(n *yaml.Node) error {
	if err := checkFields(n, "ratelimit.redis", "url", "timeout", "cluster", "key_prefix", "lease_ttl"); err != nil {
		return err
	}
	type plain RedisConfig
	return n.Decode((*plain)(c))
}

// EstimateTokens is the token charge taken at admission: the prompt estimated
// from its size in bytes (4 bytes per token, rounded up) plus the output
// allowance, which is maxTokens when the request sets it (> 0) and
// defaultMaxTokens otherwise (0: none; EstimateTokens(n, 0, 0) is the prompt
// estimate alone). The charge is corrected by Reconcile. The proxy uses
// EstimateRequest, which has a default allowance.
func EstimateTokens(promptBytes int, maxTokens, defaultMaxTokens int64) int64 {
	est := (int64(promptBytes) + 3) / 4
	if maxTokens > 0 {
		est += maxTokens
	} else if defaultMaxTokens > 0 {
		est += defaultMaxTokens
	}
	if est < 0 || est > math.MaxInt64/4 {
		est = math.MaxInt64 / 4
	}
	return est
}

// EstimateRequest is EstimateTokens for a request that generates outputs
// outputs (1 for less: n choices of each of several prompts are n times
// their number), each up to maxTokens, or to the default allowance when it
// sets none, where defaultMaxTokens 0 or less means DefaultMaxTokens (1024).
// It also returns the part of est that is default allowance the limiter may
// lower (0 when the request set max_tokens): pass them as Request.EstTokens
// and Request.DefaultOutput.
//
// Why a default at all: without one a request that sets no max_tokens is
// charged its prompt only, and any number of such streams pass a tpm limit at
// once (50 streams took 6.6 times a tpm of 1,000). Why 1024: it covers a
// typical chat answer whole (a few hundred tokens), so most such requests are
// charged about what they use and refunded the rest, while staying a small
// part of any realistic tpm, so it does not hold a tenant's requests back.
// The limiter lowers it to fit the tightest tpm (a default the client did not
// choose never makes a request too large: with tpm 1000, min(tpm, 1024) less
// the prompt), and a stream that outgrows it is charged as it goes.
//
// Why outputs: an engine asked for n choices (or best_of candidates, or
// several prompts) generates each up to the limit, and a request charged
// for one output took n times the tokens its tenant's tpm allows before the
// limit saw them. The default is lowered to fit as before, but never below
// one token for each output past the first: the client chose how many, so a
// request asking for more outputs than the tightest tpm holds tokens is too
// large, with or without max_tokens. outputs above maxOutputs count as
// maxOutputs, more than any tpm allows (maxTPM), and every product
// saturates: a hostile n of 1e9 is refused as too large, never wrapped.
func EstimateRequest(promptBytes int, maxTokens, defaultMaxTokens, outputs int64) (est, defaultOutput int64) {
	outputs = min(max(outputs, 1), maxOutputs)
	if maxTokens > 0 {
		return EstimateTokens(promptBytes, mulTokens(maxTokens, outputs), 0), 0
	}
	if defaultMaxTokens <= 0 {
		defaultMaxTokens = DefaultMaxTokens
	}
	allowance := mulTokens(defaultMaxTokens, outputs)
	est = EstimateTokens(promptBytes, 0, allowance)
	return est, min(allowance-(outputs-1), est)
}

// maxOutputs bounds the outputs EstimateRequest counts: one more than the
// largest tpm, so that a request of that many outputs is too large for any.
const maxOutputs = maxTPM + 1

// mulTokens is tokens × outputs (both positive), saturating at the largest
// estimate (EstimateTokens').
func mulTokens(tokens, outputs int64) int64 {
	const most = math.MaxInt64 / 4
	if tokens > most/outputs {
		return most
	}
	return tokens * outputs
}
