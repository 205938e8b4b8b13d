package ratelimit

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"go.yaml.in/yaml/v3"
)

const hashA = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae" // sha256("foo")
const hashB = "fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9" // sha256("bar")

// keyLike is shaped like a whole gateway key (keyshape.HoldsWhole).
const keyLike = "gp-SHVcZDGMSi89pQ3d7x0kAbCdEfGhIjKlMnOpQrStUvW"

func TestValidationMessages(t *testing.T) {
	good := func() []TenantConfig {
		return []TenantConfig{
			{Name: "acme", Keys: []KeyConfig{{ID: "acme-prod", SHA256: hashA}}, Limits: Limits{RPM: 60}},
			{Name: "beta", Keys: []KeyConfig{{ID: "beta-1", SHA256: hashB}}},
		}
	}
	if err := ValidateTenants(good()); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	// A model whose name begins with gp- is a name (the requests' check
	// serves it too), not a key.
	named := good()
	named[0].Models = map[string]Limits{"acme/gp-finetuned-support-v2": {RPM: 1}, "ollama:gp-assistant-7b-q4_K_M": {RPM: 2}}
	named[0].SLOByModel = map[string]string{"org/gp-llama3-instruct-lora": "interactive"}
	if err := ValidateTenants(named); err != nil {
		t.Fatalf("models named gp-something rejected: %v", err)
	}
	cases := []struct {
		name   string
		mutate func([]TenantConfig) []TenantConfig
		want   string
	}{
		{"short hash", func(ts []TenantConfig) []TenantConfig { ts[1].Keys[0].SHA256 = "abc"; return ts },
			"tenants[1].keys[0].sha256: want 64 hex characters"},
		{"non-hex hash", func(ts []TenantConfig) []TenantConfig { ts[0].Keys[0].SHA256 = strings.Repeat("g", 64); return ts },
			"tenants[0].keys[0].sha256: want 64 hex characters"},
		{"duplicate tenant", func(ts []TenantConfig) []TenantConfig { ts[1].Name = "acme"; return ts },
			`tenants[1].name: "acme" is already the name of tenants[0]`},
		{"duplicate key id", func(ts []TenantConfig) []TenantConfig { ts[1].Keys[0].ID = "acme-prod"; return ts },
			`tenants[1].keys[0].id: "acme-prod" is already used by tenants[0].keys[0] (tenant acme, id acme-prod)`},
		{"duplicate hash, other case", func(ts []TenantConfig) []TenantConfig { ts[1].Keys[0].SHA256 = strings.ToUpper(hashA); return ts },
			"tenants[1].keys[0].sha256: the same key is already configured as tenants[0].keys[0] (tenant acme, id acme-prod)"},
		{"missing name", func(ts []TenantConfig) []TenantConfig { ts[0].Name = ""; return ts }, "tenants[0].name: required"},
		{"bad name", func(ts []TenantConfig) []TenantConfig { ts[0].Name = "ac{me}"; return ts }, `tenants[0].name: "ac{me}": want letters`},
		{"missing key id", func(ts []TenantConfig) []TenantConfig { ts[0].Keys[0].ID = ""; return ts }, "tenants[0].keys[0].id: required"},
		{"negative rpm", func(ts []TenantConfig) []TenantConfig { ts[0].Limits.RPM = -1; return ts },
			"tenants[0].limits.rpm: must not be negative (0 means unlimited)"},
		{"burst without rpm", func(ts []TenantConfig) []TenantConfig { ts[1].Limits.Burst = 5; return ts },
			"tenants[1].limits.burst: needs rpm"},
		{"key limits", func(ts []TenantConfig) []TenantConfig { ts[0].Keys[0].Limits.TPM = -5; return ts },
			"tenants[0].keys[0].limits.tpm: must not be negative"},
		{"model limits", func(ts []TenantConfig) []TenantConfig {
			ts[0].Models = map[string]Limits{"llama": {MaxConcurrency: -1}}
			return ts
		}, `tenants[0].models["llama"].max_concurrency: must not be negative`},
		{"empty model name", func(ts []TenantConfig) []TenantConfig { ts[0].Models = map[string]Limits{"": {RPM: 1}}; return ts },
			`tenants[0].models[""]: want a model name`},
		{"huge tpm", func(ts []TenantConfig) []TenantConfig { ts[0].Limits.TPM = 1 << 50; return ts },
			"tenants[0].limits.tpm: 1125899906842624 is above the maximum"},
		{"both upstream credentials", func(ts []TenantConfig) []TenantConfig {
			ts[0].Upstream = UpstreamConfig{APIKey: "x", APIKeyEnv: "Y"}
			return ts
		}, "tenants[0].upstream: set api_key or api_key_env, not both"},
		{"bad env name", func(ts []TenantConfig) []TenantConfig { ts[0].Upstream.APIKeyEnv = "A-B"; return ts },
			`tenants[0].upstream.api_key_env: "A-B" is not an environment variable name`},
		// A key pasted as a model's name would reach the metrics' labels
		// (found by a new user's probe: config check passed it).
		{"key-shaped model", func(ts []TenantConfig) []TenantConfig {
			ts[0].Models = map[string]Limits{keyLike: {RPM: 1}}
			return ts
		}, "tenants[0].models: a model name that holds a whole gateway key"},
		{"key-shaped alias", func(ts []TenantConfig) []TenantConfig {
			ts[0].Models = map[string]Limits{"llama": {RPM: 1}}
			ts[0].ModelAliases = map[string][]string{"llama": {"l3", keyLike}}
			return ts
		}, `tenants[0].models["llama"].aliases[1]: a model name that holds a whole gateway key`},
		{"key-shaped slo_by_model", func(ts []TenantConfig) []TenantConfig {
			ts[0].SLOByModel = map[string]string{keyLike: "interactive"}
			return ts
		}, "tenants[0].slo_by_model: a model name that holds a whole gateway key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateTenants(c.mutate(good()))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v\nwant it to contain %q", err, c.want)
			}
			if strings.Contains(err.Error(), keyLike[3:19]) {
				t.Fatalf("err = %v: the key is quoted", err)
			}
		})
	}
	// Several problems are all reported.
	ts := good()
	ts[0].Name, ts[1].Keys[0].SHA256 = "", "x"
	err := ValidateTenants(ts)
	if err == nil || !strings.Contains(err.Error(), "tenants[0].name") || !strings.Contains(err.Error(), "tenants[1].keys[0].sha256") {
		t.Fatalf("err = %v, want both problems", err)
	}
}

func TestBackendConfigValidate(t *testing.T) {
	cases := []struct {
		cfg  BackendConfig
		want string // "" = valid
	}{
		{BackendConfig{}, ""},
		{BackendConfig{Backend: "redis", Redis: RedisConfig{URL: "redis://127.0.0.1:6379/3"}}, ""},
		{BackendConfig{Backend: "redis"}, `ratelimit.redis.url: required with backend "redis"`},
		{BackendConfig{Backend: "redis", Redis: RedisConfig{URL: "http://x"}}, "ratelimit.redis.url: "},
		{BackendConfig{Backend: "memcached"}, `ratelimit.backend: "memcached" is not a backend`},
		{BackendConfig{OnBackendError: "retry"}, `ratelimit.on_backend_error: "retry" is not a policy`},
		{BackendConfig{DefaultMaxTokens: -1}, "ratelimit.default_max_tokens: must not be negative"},
		// An allowance no tpm can hold: near the charge's saturation it
		// would crowd the prompt's estimate out of the charge.
		{BackendConfig{DefaultMaxTokens: maxTPM}, ""},
		{BackendConfig{DefaultMaxTokens: maxTPM + 1}, "ratelimit.default_max_tokens: 1000000000001 is more than any tpm holds (at most 1000000000000)"},
		{BackendConfig{DefaultMaxTokens: 1 << 62}, "ratelimit.default_max_tokens: 4611686018427387904 is more than any tpm holds"},
		{BackendConfig{Redis: RedisConfig{KeyPrefix: "a b"}}, "ratelimit.redis.key_prefix"},
		{BackendConfig{Redis: RedisConfig{LeaseTTL: cfgtypes.Duration(time.Millisecond)}}, "ratelimit.redis.lease_ttl"},
		// A record waits for the release of its limits up to the timeout.
		{BackendConfig{Redis: RedisConfig{Timeout: cfgtypes.Duration(10 * time.Second)}}, ""},
		{BackendConfig{Redis: RedisConfig{Timeout: cfgtypes.Duration(10*time.Second + time.Millisecond)}}, "ratelimit.redis.timeout: 10.001s is too long (at most 10s)"},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: unexpected error %v", c.cfg, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.cfg, err, c.want)
		}
	}
	d := BackendConfig{}.withDefaults()
	if d.Backend != BackendLocal || d.OnBackendError != FailOpen || d.Redis.Timeout.D() != 250*time.Millisecond ||
		d.Redis.KeyPrefix != "goodput" || d.Redis.LeaseTTL.D() != 5*time.Second || d.MaxQueueWait != 0 || d.DefaultMaxTokens != 1024 {
		t.Errorf("defaults: %+v", d)
	}
}

func TestLimitsYAMLRoundTrip(t *testing.T) {
	var l Limits
	if err := yaml.Unmarshal([]byte("{rpm: 1, tpm: 2, max_concurrency: 3, burst: 4, on_overrun: cut}"), &l); err != nil {
		t.Fatal(err)
	}
	if l != (Limits{1, 2, 3, 4, OverrunCut}) {
		t.Fatalf("%+v", l)
	}
	if (Limits{}).requestCapacity() != 0 || (Limits{RPM: 600}).requestCapacity() != 600 || (Limits{RPM: 600, Burst: 20}).requestCapacity() != 20 {
		t.Error("request capacity: burst, else rpm")
	}
}

func TestEstimateTokens(t *testing.T) {
	cases := []struct {
		bytes          int
		max, def, want int64
	}{
		{0, 0, 0, 0},
		{1, 0, 0, 1},
		{400, 0, 0, 100},
		{401, 0, 0, 101},
		{400, 50, 1024, 150},
		{400, 0, 1024, 1124},
		{400, -1, 7, 107},
	}
	for _, c := range cases {
		if got := EstimateTokens(c.bytes, c.max, c.def); got != c.want {
			t.Errorf("EstimateTokens(%d, %d, %d) = %d, want %d", c.bytes, c.max, c.def, got, c.want)
		}
	}
}

func TestEstimateRequest(t *testing.T) {
	const most = math.MaxInt64 / 4
	cases := []struct {
		bytes                        int
		max, def, outputs, want, dfl int64
	}{
		{0, 0, 0, 1, 1024, 1024}, // no max_tokens: the default allowance (0 = 1024)
		{1, 0, 0, 1, 1025, 1024},
		{401, 0, 0, 1, 1125, 1024},
		{400, 50, 1024, 1, 150, 0}, // the client's max_tokens is no default
		{400, 0, 16, 1, 116, 16},
		{400, -1, 7, 1, 107, 7},
		{401, 1, 7, 1, 102, 0},
		{400, 0, 16, 0, 116, 16},  // fewer than one output is one
		{400, 0, 16, -5, 116, 16}, // fewer than one output is one
		// Several outputs: each up to max_tokens, or the default; the
		// default may be lowered down to one token an output past the first.
		{400, 50, 1024, 8, 500, 0},
		{400, 0, 16, 8, 228, 121},
		{400, 0, 0, 3, 3172, 3070},
		// Hostile counts saturate: no product wraps, and an output count
		// over any tpm (maxOutputs) stays over it, default or not.
		{400, 1, 7, 1e15, 100 + maxOutputs, 0},
		{400, 0, 1, 1e15, 100 + maxOutputs, 1},
		{400, 0, 7, 1e15, 100 + 7*maxOutputs, 6*maxOutputs + 1},
		{400, 1 << 40, 0, 1 << 40, most, 0},
		{400, math.MaxInt64, 0, math.MaxInt64, most, 0},
		{400, 0, math.MaxInt64, math.MaxInt64, most, most - maxOutputs + 1},
	}
	for _, c := range cases {
		got, dfl := EstimateRequest(c.bytes, c.max, c.def, c.outputs)
		if got != c.want || dfl != c.dfl {
			t.Errorf("EstimateRequest(%d, %d, %d, %d) = %d, %d, want %d, %d", c.bytes, c.max, c.def, c.outputs, got, dfl, c.want, c.dfl)
		}
		if dfl < 0 || dfl > got || got < 0 {
			t.Errorf("EstimateRequest(%d, %d, %d, %d) = %d, %d: out of range", c.bytes, c.max, c.def, c.outputs, got, dfl)
		}
	}
}

// The first key of a duplicate pair is named by its tenant and id, so that
// it can be found in a file of 100,000 keys, unless they are shaped like a
// key (a pasted key is never repeated in an error).
func TestDuplicateKeyNamesTheFirst(t *testing.T) {
	pasted := "gp-" + strings.Repeat("Ab1", 10)
	ts := []TenantConfig{
		{Name: pasted, Keys: []KeyConfig{{ID: "one", SHA256: hashA}}},
		{Name: "beta", Keys: []KeyConfig{{ID: "two", SHA256: hashA}}},
	}
	err := ValidateTenants(ts)
	if err == nil || !strings.Contains(err.Error(), "tenants[1].keys[0].sha256: the same key is already configured as tenants[0].keys[0]\n") && !strings.HasSuffix(err.Error(), "tenants[0].keys[0]") {
		t.Fatalf("%v", err)
	}
	if strings.Contains(err.Error(), pasted[:19]) {
		t.Fatalf("the key-shaped name is in the error: %v", err)
	}
}

// A Redis URL that does not parse is refused without its password, which
// go-redis's and net/url's errors quote whole (a probe: `goodput config
// check` printed it).
func TestRedisURLErrorsHideThePassword(t *testing.T) {
	for _, c := range []struct {
		url     string
		cluster bool
		secret  string
	}{
		{"redis://:WrongPassw0rdABC@127.0.0.1:46x81/11", false, "WrongPassw0rdABC"},
		{"redis://user:p%40ss w@127.0.0.1:6379:1/0", false, "p%40ss w"},
		{"redis://:ab@127.0.0.1:6x/0", false, ":ab@"},
		{"redis://:S3cretS3cret@a:1,b:x/0", true, "S3cretS3cret"},
		{"redis://:S3cretS3cret@127.0.0.1:6379/0?dial_timeout=soon", false, "S3cretS3cret"},
		// Unencoded '/', '?' and '#' in the password (a review: printed whole).
		{"rediss://:S3cret/S3cret@a:1/0", false, "S3cret/S3cret"},
		{"redis://:Pw?Pw?Pw@127.0.0.1:6379/0", false, "Pw?Pw"},
		{"redis://:S3cret#S3cret@127.0.0.1:6379/0", false, "S3cret"},
	} {
		cfg := BackendConfig{Backend: "redis", Redis: RedisConfig{URL: c.url, Cluster: c.cluster}}
		err := cfg.Validate()
		if err == nil {
			t.Errorf("%s: no error", c.url)
			continue
		}
		if strings.Contains(err.Error(), c.secret) || !strings.Contains(err.Error(), "ratelimit.redis.url") {
			t.Errorf("%s: %v: want the URL's error without its password", c.url, err)
		}
		if _, _, _, err := redisClients(cfg.Redis, time.Second); err == nil || strings.Contains(err.Error(), c.secret) {
			t.Errorf("%s: redisClients: %v: want an error without the password", c.url, err)
		}
	}
}
