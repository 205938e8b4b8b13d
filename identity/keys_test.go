package identity

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/goodput/goodput/internal/keyshape"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/ratelimit"
	"go.yaml.in/yaml/v3"
)

const hashA = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae" // sha256("foo")
const hashB = "fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9" // sha256("bar")

func TestNewKey(t *testing.T) {
	k1, h1, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, h2, _ := NewKey()
	if !strings.HasPrefix(k1, keyPrefix) || len(k1) != len(keyPrefix)+43 || keyLen != len(keyPrefix)+43 {
		t.Errorf("key %q: want %q and 43 base64url characters", k1, keyPrefix)
	}
	if strings.ContainsAny(k1[len(keyPrefix):], "+/=") {
		t.Errorf("key %q is not base64url without padding", k1)
	}
	if k1 == k2 || h1 == h2 {
		t.Error("two keys are equal")
	}
	if h1 != hashKey(k1) || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(h1) {
		t.Errorf("hash %q does not match HashKey", h1)
	}
}

func TestHashKey(t *testing.T) {
	if hashKey("foo") != hashA || hashKey("bar") != hashB {
		t.Fatal("HashKey does not give the SHA-256 in lowercase hex")
	}
}

func TestFormatKeyConfig(t *testing.T) {
	key, h, _ := NewKey()
	doc := "tenants:\n  - name: acme\n    keys:\n" + FormatKeyConfig("acme-prod", h)
	var c struct {
		Tenants []ratelimit.TenantConfig `yaml:"tenants"`
	}
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatalf("%v in\n%s", err, doc)
	}
	kr, err := newKeyring(c.Tenants)
	if err != nil {
		t.Fatal(err)
	}
	if info, ok := kr.lookup([]byte(key)); !ok || info.ID != "acme-prod" || info.Tenant.Name != "acme" {
		t.Fatalf("the printed entry does not authenticate the key: %+v %v", info, ok)
	}
}

func TestExtractKey(t *testing.T) {
	cases := []struct{ auth, xkey, want string }{
		{"Bearer gp-abc", "", "gp-abc"},
		{"bearer gp-abc", "", "gp-abc"},
		{"BEARER   gp-abc  ", "", "gp-abc"},
		{"  Bearer\tgp-abc", "", "gp-abc"},
		{"", "gp-xyz", "gp-xyz"},
		{"", "  gp-xyz ", "gp-xyz"},
		{"Bearer gp-abc", "gp-xyz", "gp-abc"}, // Authorization wins
		{"Basic dXNlcjpwYXNz", "gp-xyz", "gp-xyz"},
		{"Bearer ", "gp-xyz", "gp-xyz"},
		{"Bearer", "", ""},
		{"Bearergp-abc", "", ""},
		{"gp-abc", "", ""}, // no scheme: not a bearer token
		{"", "", ""},
	}
	for _, c := range cases {
		got := ExtractKey([]byte(c.auth), []byte(c.xkey))
		if string(got) != c.want || (c.want == "" && got != nil) {
			t.Errorf("ExtractKey(%q, %q) = %q, want %q", c.auth, c.xkey, got, c.want)
		}
	}
}

func testTenants() []ratelimit.TenantConfig {
	return []ratelimit.TenantConfig{
		{Name: "acme", SLO: "interactive", Keys: []ratelimit.KeyConfig{{ID: "acme-prod", SHA256: hashA}, {ID: "acme-dev", SHA256: strings.ToUpper(hashB)}},
			Upstream: ratelimit.UpstreamConfig{APIKey: "sk-upstream"}},
		{Name: "beta"},
	}
}

func TestKeyringLookup(t *testing.T) {
	kr, err := newKeyring(testTenants())
	if err != nil {
		t.Fatal(err)
	}
	info, ok := kr.lookup([]byte("foo"))
	if !ok || info.ID != "acme-prod" || info.Tenant.Name != "acme" || info.Tenant.SLO != "interactive" || info.Tenant.UpstreamKey != "sk-upstream" {
		t.Fatalf("foo: %+v %v", info, ok)
	}
	if info, ok := kr.lookup([]byte("bar")); !ok || info.ID != "acme-dev" { // hash configured in upper case
		t.Fatalf("bar: %+v %v", info, ok)
	}
	for _, k := range []string{"", "fo", "foo ", "FOO", hashA} {
		if info, ok := kr.lookup([]byte(k)); ok {
			t.Errorf("%q resolved to %+v", k, info)
		}
	}
	if kr.Len() != 2 || len(kr.Tenants()) != 2 || kr.tenant("beta") == nil || kr.tenant("zeta") != nil {
		t.Error("Len, Tenants or Tenant")
	}
	var nilKR *Keyring
	if _, ok := nilKR.lookup([]byte("foo")); ok {
		t.Error("nil keyring resolved a key")
	}
	key := []byte("foo")
	if n := testenv.AllocsPerRun(100, func() { kr.lookup(key) }); n != 0 {
		t.Errorf("Lookup allocates %v times", n)
	}
}

// Two stored digests that share their first 8 bytes: the full digest decides.
func TestKeyringPrefixCollision(t *testing.T) {
	kr, err := newKeyring(testTenants())
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("foo"))
	p := binary.LittleEndian.Uint64(sum[:8])
	fake := keyEntry{digest: sum, info: KeyInfo{ID: "impostor"}}
	fake.digest[31] ^= 1
	kr.entries = append(kr.entries, fake)
	kr.byPrefix[p] = append([]int32{int32(len(kr.entries) - 1)}, kr.byPrefix[p]...)
	if info, ok := kr.lookup([]byte("foo")); !ok || info.ID != "acme-prod" {
		t.Fatalf("got %+v %v, want acme-prod", info, ok)
	}
}

func TestKeyringUpstreamEnv(t *testing.T) {
	ts := testTenants()
	ts[1].Upstream.APIKeyEnv = "GOODPUT_TEST_UPSTREAM_KEY"
	t.Setenv("GOODPUT_TEST_UPSTREAM_KEY", "")
	if _, err := newKeyring(ts); err == nil || !strings.Contains(err.Error(), "tenants[1].upstream.api_key_env: environment variable GOODPUT_TEST_UPSTREAM_KEY is not set") {
		t.Fatalf("err = %v", err)
	}
	t.Setenv("GOODPUT_TEST_UPSTREAM_KEY", "sk-beta")
	kr, err := newKeyring(ts)
	if err != nil {
		t.Fatal(err)
	}
	if kr.tenant("beta").UpstreamKey != "sk-beta" || kr.tenant("acme").UpstreamKey != "sk-upstream" {
		t.Error("upstream keys not resolved")
	}
}

// An upstream credential is sent in a header: the line break a secret
// file ends with is dropped, and one inside it (it would end the field and
// start another toward the engine) is an error that does not quote it.
func TestKeyringUpstreamKeyIsAFieldValue(t *testing.T) {
	ts := testTenants()
	ts[1].Upstream.APIKeyEnv = "GOODPUT_TEST_UPSTREAM_KEY"
	t.Setenv("GOODPUT_TEST_UPSTREAM_KEY", "sk-beta\n")
	ts[0].Upstream.APIKey = " sk-acme\r\n"
	kr, err := newKeyring(ts)
	if err != nil {
		t.Fatal(err)
	}
	if kr.tenant("beta").UpstreamKey != "sk-beta" || kr.tenant("acme").UpstreamKey != "sk-acme" {
		t.Fatalf("keys %q %q", kr.tenant("beta").UpstreamKey, kr.tenant("acme").UpstreamKey)
	}
	for _, bad := range []string{"sk-ac\nme", "sk-ac\rme", "sk\x00", "sk\x7f1", "sk\tx"} {
		ts[0].Upstream.APIKey = bad
		_, err := newKeyring(ts)
		if err == nil || !strings.Contains(err.Error(), "tenants[0].upstream.api_key: the upstream credential holds a control character") || strings.Contains(err.Error(), "sk") {
			t.Fatalf("%q: err = %v", bad, err)
		}
	}
	// Only white space is no credential, not a silent none.
	ts[0].Upstream.APIKey = "sk-acme"
	t.Setenv("GOODPUT_TEST_UPSTREAM_KEY", "\n")
	if _, err := newKeyring(ts); err == nil || !strings.Contains(err.Error(), "tenants[1].upstream: the upstream credential is only white space") {
		t.Fatalf("white space: err = %v", err)
	}
}

func BenchmarkKeyringLookup(b *testing.B) {
	kr, err := newKeyring(testTenants())
	if err != nil {
		b.Fatal(err)
	}
	key := []byte("gp-0123456789abcdefghijklmnopqrstuvwxyzABCDEFG") // the length of a NewKey key
	b.ReportAllocs()
	for b.Loop() {
		kr.lookup(key)
	}
}

// tenant returns the tenant with this name, or nil.
func (kr *Keyring) tenant(name string) *Tenant {
	if kr == nil {
		return nil
	}
	for _, t := range kr.Tenants() {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// A key NewKey makes, or a fragment of one, is found inside any text; what
// merely starts like one is not.
func TestHoldsKeyShape(t *testing.T) {
	key, _, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{key, "req-" + key, key + "x", key[:19], "x" + key[:24] + "y", "gp-x " + key[:20]} {
		if !HoldsKeyShape([]byte(s)) {
			t.Errorf("%q: not found", s)
		}
	}
	for _, s := range []string{"", "req-1", "gp-short-1", "gp-", key[:18], "4bf92f3577b34da6a3ce929d0e0e4736"} {
		if HoldsKeyShape([]byte(s)) {
			t.Errorf("%q: found", s)
		}
	}
}

// A key id or tenant name shaped like a gateway key (a key pasted where its
// name goes) is refused: names and ids are written to the request log, and
// the key with them. No error quotes it, whatever else is wrong with it
// (a character not allowed, over 64 characters, a duplicate).
func TestKeyIDShapedLikeAKeyIsRefused(t *testing.T) {
	key, _, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	frag := key[len(keyPrefix) : len(keyPrefix)+16]
	for _, id := range []string{key, "acme-" + key, key[:len(keyPrefix)+16], "acme:" + key, key + strings.Repeat("x", 64)} {
		for _, name := range []bool{false, true} {
			ts := testTenants()
			if name {
				ts[0].Name = id
			} else {
				ts[0].Keys[0].ID = id
				ts[0].Keys[1].ID = id // a duplicate too
			}
			_, err := newKeyring(ts)
			if err == nil || !strings.Contains(err.Error(), "shaped like a gateway key") {
				t.Fatalf("name %v, %d characters: %v, want it refused", name, len(id), err)
			}
			if strings.Contains(err.Error(), frag) {
				t.Fatalf("the error quotes the key: %v", err)
			}
		}
	}
	ts := testTenants()
	ts[0].Keys[0].ID = "gp-short-1"
	if _, err := newKeyring(ts); err != nil {
		t.Fatalf("an id that is no key's shape: %v", err)
	}
}

// A tenant name or key id that is one of the configured keys, of the
// operator's own form (no gp- shape tells it from a name), is refused, and
// no error quotes it, even one over 64 characters (found by an operator's
// probe: config check passed, and the key was in the log and 206 series).
func TestNameThatIsAConfiguredKeyIsRefused(t *testing.T) {
	for _, own := range []string{"sk-live-OperatorSecret0123456789", "sk-live-" + strings.Repeat("Z9", 40)} {
		sum := sha256.Sum256([]byte(own))
		hash := hex.EncodeToString(sum[:])
		for _, name := range []bool{false, true} {
			ts := testTenants()
			ts[1].Keys = []ratelimit.KeyConfig{{ID: "beta-1", SHA256: hash}} // another tenant's key, as it may be
			if name {
				ts[0].Name = own
			} else {
				ts[0].Keys[0].ID = own
			}
			_, err := newKeyring(ts)
			if err == nil || !strings.Contains(err.Error(), "is one of the gateway keys configured") {
				t.Fatalf("name %v, %d characters: %v, want it refused", name, len(own), err)
			}
			if strings.Contains(err.Error(), own[8:24]) {
				t.Fatalf("the error quotes the key: %v", err)
			}
		}
	}
}

// HoldsKey finds a whole key of the store inside a longer value, whatever
// is around it, and nothing in a value that only looks like a key.
func TestStoreHoldsKey(t *testing.T) {
	key, hash, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	other, _, _ := NewKey() // not in the store
	s, err := NewStore([]ratelimit.TenantConfig{{Name: "acme", Keys: []ratelimit.KeyConfig{{ID: "acme-1", SHA256: hash}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{key, "x-" + key, "Bearer " + key + "x", "gp-gp-" + key, key[:10] + key, key[1:]} {
		if !s.HoldsKey([]byte(v)) {
			t.Errorf("%q: the key inside was not found", v)
		}
	}
	for _, v := range []string{"", "gp-", other, "x-" + other, key[:keyLen-1], key[len(keyPrefix)+1:], "acme/gp-finetuned-support-v2"} {
		if s.HoldsKey([]byte(v)) {
			t.Errorf("%q: a key found where there is none", v)
		}
	}
}

// Keys of the operator's own form (no gp- prefix, any length) are found
// as the whole value or as one of its tokens, whichever tenant's they are;
// a value of more tokens than HoldsKey looks up counts as holding one.
// Looking through a common value costs no allocation.
func TestStoreHoldsKeyOfAnyForm(t *testing.T) {
	own := []string{"sk-proj-4f9QeZ_b1c.x~y+z/w==", "acme-secret-42", "k:e!y@9"}
	var tenants []ratelimit.TenantConfig
	for i, k := range own {
		tenants = append(tenants, ratelimit.TenantConfig{Name: fmt.Sprintf("t%d", i), Keys: []ratelimit.KeyConfig{{ID: fmt.Sprintf("k%d", i), SHA256: hashKey(k)}}})
	}
	s, err := NewStore(tenants)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range own {
		for _, v := range []string{k, " " + k + " ", "Bearer " + k, `"` + k + `"`, k + ",x", "(" + k + ")", "a b\t" + k + "\n"} {
			if !s.HoldsKey([]byte(v)) {
				t.Errorf("%q: the key %q inside was not found", v, k)
			}
		}
	}
	// The b64token runs of a word: found when the key is made of them.
	for _, v := range []string{"model:acme-secret-42", "key=acme-secret-42", "user@acme-secret-42", "acme-secret-42!", "x:sk-proj-4f9QeZ_b1c.x~y+z/w==:y"} {
		if !s.HoldsKey([]byte(v)) {
			t.Errorf("%q: the key inside was not found", v)
		}
	}
	// What remains: a key glued to other token characters, and a part of
	// one (the store keeps hashes).
	for _, v := range []string{"req-acme-secret-42", "acme-secret-42.v2", "model:k:e!y@9", "acme-secret-4", "cme-secret-42", "meta-llama/Llama-3.1-8B-Instruct", "gpt-4o mini"} {
		if s.HoldsKey([]byte(v)) {
			t.Errorf("%q: a key found", v)
		}
	}
	if !s.HoldsKey([]byte(strings.Repeat("a ", maxTokenLookups+1))) {
		t.Error("a value of more tokens than are looked up counts as holding no key")
	}
	if s.HoldsKey([]byte(strings.Repeat("a ", maxTokenLookups-1))) {
		t.Error("a value of fewer tokens than are looked up counts as holding a key")
	}
	// FindKey tells a key found from a value not looked through whole.
	for _, c := range []struct {
		v    string
		want KeyFind
	}{
		{"meta-llama/Llama-3.1-8B-Instruct", NoKey},
		{"Bearer acme-secret-42", KeyFound},
		{strings.Repeat("a ", maxTokenLookups+1), TooManyToLook},
		{strings.Repeat("a ", maxTokenLookups-1), NoKey},
		{strings.Repeat("gp-", maxTokenLookups+keyLen), TooManyToLook},
	} {
		if got := s.FindKey([]byte(c.v)); got != c.want {
			t.Errorf("FindKey(%.40q…) = %d, want %d", c.v, got, c.want)
		}
	}
	for _, v := range [][]byte{[]byte("meta-llama/Llama-3.1-8B-Instruct"), []byte("4bf92f35-77b3-4da6-a3ce-929d0e0e4736")} {
		if n := testenv.AllocsPerRun(100, func() { s.HoldsKey(v) }); n != 0 {
			t.Errorf("%q: %v allocations", v, n)
		}
	}
}

// A value in which a key NewKey makes could begin (a keyPrefix with
// keyLen characters from it) at more places than HoldsKey looks up counts
// as holding one: each place is a SHA-256, and a model of a megabyte of
// "gp-" was 350,000 of them (76 ms of CPU for one request's model). Fewer
// places are each looked up, a key among them found.
func TestStoreHoldsKeyBoundsNewKeyLookups(t *testing.T) {
	key, sum, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStore([]ratelimit.TenantConfig{{Name: "acme", Keys: []ratelimit.KeyConfig{{ID: "k", SHA256: sum}}}})
	if err != nil {
		t.Fatal(err)
	}
	places := func(v string) int { // where a NewKey key could begin
		n := 0
		for i := 0; i+keyLen <= len(v); i++ {
			if strings.HasPrefix(v[i:], keyPrefix) {
				n++
			}
		}
		return n
	}
	over := strings.Repeat("gp-", maxTokenLookups+keyLen)
	if places(over) <= maxTokenLookups {
		t.Fatalf("the test's value has %d places", places(over))
	}
	for _, v := range []string{over, "x " + over, over + key} {
		if !s.HoldsKey([]byte(v)) {
			t.Errorf("a value of %d places where a key could begin counts as holding none", places(v))
		}
	}
	under := strings.Repeat("gp-", maxTokenLookups/2)
	// (A dot ends the run of base64url characters, in which every place is
	// also looked up for a key's part after its prefix: holdsKeyBody.)
	if s.HoldsKey([]byte(under)) || s.HoldsKey([]byte(under+".gp-"+strings.Repeat("A", keyLen))) {
		t.Error("a value of fewer places than are looked up counts as holding a key")
	}
	if !s.HoldsKey([]byte(under + key)) {
		t.Error("a key behind fewer places than are looked up was not found")
	}
}

// BenchmarkStoreHoldsKey: what HoldsKey costs for common values (a model
// name, an Ollama tag, a UUID request id) and for the worst a client can
// send as a model (a megabyte: every token, every place a NewKey key could
// begin, looked up up to the bounds).
//
//	go test -run '^$' -bench StoreHoldsKey ./identity
func BenchmarkStoreHoldsKey(b *testing.B) {
	_, sum, err := NewKey()
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewStore([]ratelimit.TenantConfig{{Name: "acme", Keys: []ratelimit.KeyConfig{{ID: "k", SHA256: sum}}}})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, v string }{
		{"model", "meta-llama/Llama-3.1-8B-Instruct"},
		{"ollama-tag", "llama3.1:8b-instruct-q4_K_M"},
		{"uuid", "4bf92f35-77b3-4da6-a3ce-929d0e0e4736"},
		{"hex-64", strings.Repeat("4bf92f3577b34da6", 4)},
		{"mixed-64", strings.Repeat("4bF92f3577B34dA6", 4)},
		{"64-words", strings.Repeat("a ", maxTokenLookups)},
		{"gp-1MiB", strings.Repeat("gp-", 1<<20/3)},
		{"word-1MiB", strings.Repeat("x", 1<<20)},
		{"runs-1MiB", strings.Repeat("x", 1<<19) + " " + strings.Repeat("y:", 1<<18)},
	} {
		v := []byte(c.v)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(v)))
			b.ReportAllocs()
			for b.Loop() {
				s.HoldsKey(v)
			}
		})
	}
}

// RedactKeys replaces every token that is a key, of any tenant and form,
// and nothing else; text without one comes back as it was, unallocated.
func TestStoreRedactKeys(t *testing.T) {
	own := "acme-secret-42"
	s, err := NewStore([]ratelimit.TenantConfig{{Name: "acme", Keys: []ratelimit.KeyConfig{{ID: "k", SHA256: hashKey(own)}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"invalid input: my key is " + own, "invalid input: my key is " + redacted},
		{own + " and '" + own + "'.", redacted + " and '" + redacted + "'."},
		{"key=" + own + ";", "key=" + redacted + ";"},
		{"req-" + own + " stays", "req-" + own + " stays"}, // glued: not found
		{"nothing here", "nothing here"},
	} {
		if got := s.RedactKeys(c.in); got != c.want {
			t.Errorf("RedactKeys(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	long := strings.Repeat("a ", maxRedactLookups) + own
	if got := s.RedactKeys(long); strings.Contains(got, own) || !strings.HasSuffix(got, "…") {
		t.Errorf("past the lookups: %q", got[len(got)-40:])
	}
	words := strings.Repeat(strings.Repeat("x", 40)+" ", maxRedactBytes/41) // words shorter than a key's part after its prefix: one lookup each
	big := words + strings.Repeat("x", maxRedactBytes-10-len(words)) + " " + own + "-tail and more"
	if got := s.RedactKeys(big); strings.Contains(got, "acme-sec") || !strings.HasSuffix(got, " …") {
		t.Errorf("past the bytes looked through: %q", got[len(got)-40:])
	}
	msg := "upstream status 503: the engine is overloaded, try again"
	if n := testenv.AllocsPerRun(100, func() { _ = s.RedactKeys(msg) }); n != 0 {
		t.Errorf("RedactKeys of a message without a key allocates %v times", n)
	}
}

// RedactUpstream replaces the tenants' upstream credentials wherever they
// are (glued to other text, in an echoed Authorization field), the longest
// first, and RedactKeys the gateway keys after it; text without a
// credential comes back as it was, unallocated.
func TestStoreRedactUpstreamCredentials(t *testing.T) {
	t.Setenv("GOODPUT_TEST_UPSTREAM_KEY", "engine-cred-from-env-77")
	s, err := NewStore([]ratelimit.TenantConfig{
		{Name: "acme", Keys: []ratelimit.KeyConfig{{ID: "k", SHA256: hashKey("acme-secret-42")}}, Upstream: ratelimit.UpstreamConfig{APIKey: "engine-cred"}},
		{Name: "beta", Keys: []ratelimit.KeyConfig{{ID: "b", SHA256: hashKey("beta-secret-42")}}, Upstream: ratelimit.UpstreamConfig{APIKeyEnv: "GOODPUT_TEST_UPSTREAM_KEY"}},
		{Name: "gamma", Keys: []ratelimit.KeyConfig{{ID: "g", SHA256: hashKey("gamma-secret-42")}}, Upstream: ratelimit.UpstreamConfig{APIKey: "engine-cred"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ in, want string }{
		{`invalid header: "Authorization: Bearer engine-cred"`, `invalid header: "Authorization: Bearer ` + redacted + `"`},
		{"x=engine-cred-from-env-77;", "x=" + redacted + ";"},
		{"Bearer engine-cred and acme-secret-42", "Bearer " + redacted + " and " + redacted},
		{"engine-cre stays", "engine-cre stays"},
	} {
		if got := s.RedactKeys(s.RedactUpstream(c.in)); got != c.want {
			t.Errorf("RedactKeys(RedactUpstream(%q)) = %q, want %q", c.in, got, c.want)
		}
	}
	msg := "upstream status 401: invalid api key"
	if n := testenv.AllocsPerRun(100, func() { _ = s.RedactUpstream(msg) }); n != 0 {
		t.Errorf("RedactUpstream of a message without a credential allocates %v times", n)
	}
}

// BenchmarkKeyringLookupScale looks up a configured key among 10 and
// among 100,000 keys (20,000 tenants of 5), the size of a platform's
// keyring: the cost is the key's SHA-256 and one map probe either way.
//
//	go test -run '^$' -bench KeyringLookupScale ./identity
func BenchmarkKeyringLookupScale(b *testing.B) {
	for _, n := range []int{10, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			var tenants []ratelimit.TenantConfig
			var keys [][]byte
			for i := range n {
				if i%5 == 0 {
					tenants = append(tenants, ratelimit.TenantConfig{Name: fmt.Sprintf("t%d", i/5)})
				}
				key := fmt.Appendf(nil, "gp-%043d", i)
				t := &tenants[len(tenants)-1]
				t.Keys = append(t.Keys, ratelimit.KeyConfig{ID: fmt.Sprintf("k%d", i), SHA256: hashKey(string(key))})
				keys = append(keys, key)
			}
			kr, err := newKeyring(tenants)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, ok := kr.lookup(keys[i%len(keys)]); !ok {
					b.Fatal("key not found")
				}
				i += 7919
			}
		})
	}
}

// A NewKey key without its prefix is the whole of its secret (the prefix
// is every key's): HoldsKey finds it anywhere in a value, for any tenant's
// key, and RedactKeys replaces it, as they do the key itself. A field too
// long to look through counts as holding one; a common value costs no
// lookup and no allocation.
func TestStoreHoldsKeyWithoutPrefix(t *testing.T) {
	key, sum, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	other, _, _ := NewKey() // not in the store
	s, err := NewStore([]ratelimit.TenantConfig{
		{Name: "acme", Keys: []ratelimit.KeyConfig{{ID: "a", SHA256: hashKey("acme-secret-42")}}},
		{Name: "beta", Keys: []ratelimit.KeyConfig{{ID: "b", SHA256: sum}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	body := key[len(keyPrefix):]
	if len(body) != bodyLen {
		t.Fatalf("a key's part after its prefix is %d characters", len(body))
	}
	for _, v := range []string{body, "req-" + body, body + "-v2", "id:" + body, `"` + body + `"`, "a b " + body + " c", "x_" + body + "_y", "p-" + body} {
		if got := s.FindKey([]byte(v)); got != KeyFound {
			t.Errorf("FindKey(%q) = %d, want the key found", v, got)
		}
	}
	for _, v := range []string{other[len(keyPrefix):], "req-" + other[len(keyPrefix):], body[1:], body[:bodyLen-1], body[:20] + "." + body[20:], "4bf92f35-77b3-4da6-a3ce-929d0e0e4736", "chatcmpl-" + strings.Repeat("7", 32)} {
		if got := s.FindKey([]byte(v)); got != NoKey {
			t.Errorf("FindKey(%q) = %d, want none", v, got)
		}
	}
	// Every place in a run of letters of both cases is a lookup: a run of
	// bodyLen+64 characters has 65, one more than are looked up.
	mixed := func(n int) string { return strings.Repeat("xY", n)[:n] }
	if got := s.FindKey([]byte(mixed(bodyLen + maxTokenLookups - 1))); got != NoKey {
		t.Errorf("a run of %d places: %d, want none", maxTokenLookups, got)
	}
	if got := s.FindKey([]byte(mixed(bodyLen + maxTokenLookups))); got != TooManyToLook {
		t.Errorf("a run of %d places: %d, want too many to look", maxTokenLookups+1, got)
	}
	if got := s.FindKey([]byte(mixed(bodyLen+maxTokenLookups/2) + " " + body)); got != KeyFound {
		t.Errorf("a key's part behind fewer places than are looked up: %d, want the key found", got)
	}
	// A place whose characters lack a case is no key NewKey makes: a hex
	// digest of 128 characters (a SHA-512 as a request id) or a long name
	// in one case is looked through whole, without a lookup (found by a
	// review: they were replaced, or refused, as too long to look through).
	for _, v := range []string{strings.Repeat("0123456789abcdef", 8), strings.ToUpper(strings.Repeat("0123456789abcdef", 8)), strings.Repeat("my_finetune-", 20), "00-" + strings.Repeat("4bf92f3577b34da6", 2) + "-00f067aa0ba902b7-01"} {
		if got := s.FindKey([]byte(v)); got != NoKey {
			t.Errorf("FindKey(%.40q…) = %d, want none", v, got)
		}
	}
	for _, body := range []string{strings.Repeat("a", bodyLen), strings.Repeat("A1", bodyLen)[:bodyLen], body[:bodyLen-1]} {
		if mixedCase(body) {
			t.Errorf("mixedCase(%q) = true", body)
		}
	}
	if !mixedCase(body) {
		t.Errorf("mixedCase(%q) = false", body)
	}
	for range 1000 {
		k, _, err := NewKey()
		body := k[len(keyPrefix):]
		if err != nil || !strings.ContainsAny(body, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") || !strings.ContainsAny(body, "abcdefghijklmnopqrstuvwxyz") {
			t.Fatalf("NewKey made %q (%v): its part after the prefix lacks a case", k, err)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"invalid input: " + body, "invalid input: " + redacted},
		{"req-" + body + " stays out", "req-" + redacted + " stays out"},
		{"k=" + body + "." + body, "k=" + redacted + "." + redacted},
		{"k=" + body + body + "x", "k=" + redacted + redacted + "x"},
		{"acme-secret-42:" + body, redacted + ":" + redacted},
		{body[1:] + " stays", body[1:] + " stays"},
	} {
		if got := s.RedactKeys(c.in); got != c.want {
			t.Errorf("RedactKeys(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := s.RedactKeys(strings.Repeat("xY", bodyLen+maxRedactLookups) + " " + body); strings.Contains(got, body) || !strings.HasSuffix(got, "…") {
		t.Errorf("past the lookups: %q", got[max(0, len(got)-60):])
	}
	for _, v := range [][]byte{[]byte(other[len(keyPrefix):]), []byte("meta-llama/Llama-3.1-8B-Instruct")} {
		if n := testenv.AllocsPerRun(100, func() { s.HoldsKey(v) }); n != 0 {
			t.Errorf("%q: %v allocations", v, n)
		}
	}
}

// RedactKeysOf finds the keys whose digests it is given, with their
// prefix or without it, on every line of the text, whole: a configuration
// check's errors quote what they refuse, and a key pasted into the wrong
// field of the file that holds its digest was quoted.
func TestRedactKeysOf(t *testing.T) {
	key, sum, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	other, _, _ := NewKey() // its digest is not given
	body, otherBody := key[len(keyPrefix):], other[len(keyPrefix):]
	text := "line 3: tenants[0].slo: unknown class \"" + body + "\"\n" +
		"line 9: tenants[1].slo: unknown class \"" + otherBody + "\"\n" +
		"line 12: tenants[2].models: unknown field " + key + "-x\n" +
		"line 14: tenant_header: \"" + strings.Repeat("xY", 3000) + body + "\" is not a header name\n"
	got := RedactKeysOf(text, []string{"not a digest", strings.ToUpper(sum)})
	if strings.Contains(got, body) {
		t.Errorf("the key's part after its prefix is still there:\n%s", got)
	}
	for _, want := range []string{"line 3: tenants[0].slo: unknown class \"[redacted]\"\n", "unknown class \"" + otherBody + "\"\n", "unknown field gp-[redacted]-x\n", "[redacted]\" is not a header name\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
	for _, d := range [][]string{nil, {sum[:63]}, {sum + "0"}, {"x" + sum[1:]}} {
		if got := RedactKeysOf(text, d); got != text {
			t.Errorf("with the digests %q the text changed:\n%s", d, got)
		}
	}
}

// A reload keeps redacting the upstream credentials the keyring it replaces
// had (a request in flight was sent with one), for one reload: the one
// after it drops them.
func TestStoreRedactUpstreamRetiredCredential(t *testing.T) {
	tenant := func(cred string) []ratelimit.TenantConfig {
		return []ratelimit.TenantConfig{{Name: "acme", Keys: []ratelimit.KeyConfig{{ID: "k", SHA256: hashKey("acme-secret-42")}}, Upstream: ratelimit.UpstreamConfig{APIKey: cred}}}
	}
	s, err := NewStore(tenant("engine-cred-one"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(tenant("engine-cred-two"), nil); err != nil {
		t.Fatal(err)
	}
	if got, want := s.RedactUpstream("Bearer engine-cred-one, Bearer engine-cred-two"), "Bearer "+redacted+", Bearer "+redacted; got != want {
		t.Errorf("after the rotation: %q, want %q", got, want)
	}
	if err := s.Reload(tenant("engine-cred-three"), nil); err != nil {
		t.Fatal(err)
	}
	if got, want := s.RedactUpstream("engine-cred-one engine-cred-two engine-cred-three"), "engine-cred-one "+redacted+" "+redacted; got != want {
		t.Errorf("after a second rotation: %q, want %q", got, want)
	}
}

// An upstream credential with a gateway key's shape inside it is redacted
// whole: RedactUpstream comes first, before anything cuts the key's shape
// out of it (keyshape.Redact, which would leave the rest in clear:
// TestEngineQuotingAnUpstreamCredentialShapedInPartLikeAKeyIsRedacted
// follows a message through the gateway's order).
func TestStoreRedactUpstreamCredentialShapedInPartLikeAKey(t *testing.T) {
	const cred = "Zx9q7Lk2Wm4gp-AAAAAAAAAAAAAAAAAAAA.Rt5Yh8Jk3Np6"
	s, err := NewStore([]ratelimit.TenantConfig{{Name: "acme", Keys: []ratelimit.KeyConfig{{ID: "k", SHA256: hashKey("acme-secret-42")}}, Upstream: ratelimit.UpstreamConfig{APIKey: cred}}})
	if err != nil {
		t.Fatal(err)
	}
	in := "Bearer " + cred
	if got, want := s.RedactKeys(keyshape.Redact(s.RedactUpstream(in))), "Bearer "+redacted; got != want {
		t.Errorf("RedactKeys(keyshape.Redact(RedactUpstream(%q))) = %q, want %q", in, got, want)
	}
}

// RedactUpstream replaces what it finds once, and does not look at what it
// wrote: credentials found in "[redacted]" (one letter each) replace the
// letters of the text, not those of an earlier replacement.
func TestStoreRedactUpstreamShortCredentials(t *testing.T) {
	var tenants []ratelimit.TenantConfig
	for i, cred := range []string{"e", "d", "a"} {
		tenants = append(tenants, ratelimit.TenantConfig{Name: fmt.Sprintf("t%d", i), Keys: []ratelimit.KeyConfig{{ID: fmt.Sprintf("k%d", i), SHA256: hashKey(fmt.Sprintf("secret-%d-0123456789", i))}}, Upstream: ratelimit.UpstreamConfig{APIKey: cred}})
	}
	s, err := NewStore(tenants)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.RedactUpstream("error"), redacted+"rror"; got != want {
		t.Errorf("RedactUpstream(%q) = %q, want %q", "error", got, want)
	}
}

// Among many upstream credentials (20,000 tenants, each its own) a text is
// looked through once, each place looked up in the credentials' index
// (not searched for each credential: 30 ms for a 4 KiB message at this
// scale; BenchmarkRedactUpstreamManyCredentials measures it), and
// the longest credential at a place is the one replaced.
func TestStoreRedactUpstreamManyCredentials(t *testing.T) {
	s := manyUpstreamCredentials(t)
	if kr := s.Keyring(); kr.upIndex == nil {
		t.Fatalf("%d upstream credentials and no index", len(kr.upstreamKeys))
	}
	msg := strings.Repeat("the prompt is too long for the model, s", 100)
	if got := s.RedactUpstream(msg); got != msg {
		t.Fatalf("a message without a credential changed: %q", got)
	}
	for _, c := range []struct{ in, want string }{
		{"Bearer sk-upstream-credential-00012345 and x7.", "Bearer " + redacted + " and " + redacted + "."},
		{"sk-upstream-credential-0001234", "sk-upstream-credential-0001234"},
	} {
		if got := s.RedactUpstream(c.in); got != c.want {
			t.Errorf("RedactUpstream(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// manyUpstreamCredentials is a store of 20,000 tenants, each with a key and
// an upstream credential of its own, one of them two bytes long.
func manyUpstreamCredentials(t testing.TB) *Store {
	tenants := make([]ratelimit.TenantConfig, 20000)
	for i := range tenants {
		tenants[i] = ratelimit.TenantConfig{Name: fmt.Sprintf("t%d", i), Keys: []ratelimit.KeyConfig{{ID: fmt.Sprintf("k%d", i), SHA256: hashKey(fmt.Sprintf("secret-%d-0123456789", i))}}, Upstream: ratelimit.UpstreamConfig{APIKey: fmt.Sprintf("sk-upstream-credential-%08d", i)}}
	}
	tenants[7].Upstream.APIKey = "x7"
	s, err := NewStore(tenants)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// BenchmarkRedactUpstreamManyCredentials is the redaction of a 3.9 KiB
// error message without a credential among 20,000 upstream credentials:
// what every answer the gateway writes itself under gateway keys pays (a
// 401 included).
func BenchmarkRedactUpstreamManyCredentials(b *testing.B) {
	s := manyUpstreamCredentials(b)
	msg := strings.Repeat("the prompt is too long for the model, s", 100)
	b.ReportAllocs()
	for b.Loop() {
		if s.RedactUpstream(msg) != msg {
			b.Fatal("changed")
		}
	}
}
