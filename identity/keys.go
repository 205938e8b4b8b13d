package identity

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/goodput/goodput/internal/keyshape"
	"github.com/goodput/goodput/ratelimit"
)

// keyPrefix starts every key made by NewKey (keyshape.Prefix).
const keyPrefix = keyshape.Prefix

// keyBytes is how much randomness a key holds; keyLen is the length of a
// key NewKey makes: keyPrefix and keyBytes in unpadded base64url.
const (
	keyBytes = 32
	keyLen   = len(keyPrefix) + (keyBytes*8+5)/6
)

// NewKey returns a fresh random gateway key ("gp-" followed by 43 base64url
// characters: 256 bits from crypto/rand) and the hex SHA-256 to put in the
// configuration.
func NewKey() (key, sha256hex string, err error) {
	var b [keyBytes]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return "", "", fmt.Errorf("identity: reading random bytes: %w", err)
		}
		// Letters of both cases: what a key's part after its prefix is
		// looked for by (bodyScan). One draw in about 2.5 billion lacks
		// a case, and is drawn again.
		if body := base64.RawURLEncoding.EncodeToString(b[:]); mixedCase(body) {
			key = keyPrefix + body
			return key, hashKey(key), nil
		}
	}
}

// HoldsKeyShape reports whether b holds, anywhere in it, something shaped
// like a key NewKey makes: keyPrefix and at least 16 characters of its
// base64url part, a whole key or a fragment long enough to matter.
func HoldsKeyShape(b []byte) bool { return keyshape.Holds(b) }

// hashKey returns the lowercase hex SHA-256 of a key, as stored in the
// configuration's `sha256` field.
func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// FormatKeyConfig returns the configuration lines for a key, ready to paste
// under a tenant's `keys:` list.
func FormatKeyConfig(id, sha256hex string) string {
	return fmt.Sprintf("      - id: %s\n        sha256: %q\n", id, sha256hex)
}

var bearer = []byte("bearer")

// ExtractKey returns the gateway key a request presents: the token of an
// `Authorization: Bearer <key>` header (scheme case-insensitive), else the
// value of `x-api-key`. Surrounding spaces are trimmed. It returns nil when
// neither header carries a key. The result aliases the arguments.
func ExtractKey(authorization, xAPIKey []byte) []byte {
	a := bytes.TrimSpace(authorization)
	if len(a) > len(bearer) && bytes.EqualFold(a[:len(bearer)], bearer) && (a[len(bearer)] == ' ' || a[len(bearer)] == '\t') {
		if k := bytes.TrimSpace(a[len(bearer)+1:]); len(k) > 0 {
			return k
		}
	}
	if k := bytes.TrimSpace(xAPIKey); len(k) > 0 {
		return k
	}
	return nil
}

// Tenant is a validated tenant with its upstream credential resolved. It is
// shared, read-only, by every request that authenticates as the tenant until
// the next reload.
type Tenant struct {
	// Name is the tenant's name (ratelimit.TenantConfig.Name).
	Name string
	// SLO is the tenant's SLO class name; empty = default.
	SLO string
	// UpstreamKey is the credential to send upstream in place of the gateway
	// key; empty = send none.
	UpstreamKey string
	// Config is the tenant's configuration entry.
	Config ratelimit.TenantConfig
}

// KeyInfo is what a gateway key resolves to.
type KeyInfo struct {
	// ID is the key's id (ratelimit.KeyConfig.ID), safe to log.
	ID string
	// Tenant is the tenant the key belongs to.
	Tenant *Tenant
}

type keyEntry struct {
	digest [sha256.Size]byte
	info   KeyInfo
}

// Keyring maps gateway keys to tenants. It is immutable once built and safe
// for concurrent use.
//
// Lookup hashes the presented key with SHA-256, finds candidate entries by the
// first 8 bytes of the digest, and accepts one only if the whole digest matches
// under crypto/subtle.ConstantTimeCompare. The time taken therefore depends on
// the digest of the attacker's own guess, never on how many bytes of a stored
// digest it shares, and stored keys are never held in clear.
type Keyring struct {
	byPrefix map[uint64][]int32
	entries  []keyEntry
	tenants  []*Tenant
	// upstreamKeys are the tenants' upstream credentials, each once,
	// longest first (one that holds another is replaced whole):
	// RedactUpstream replaces them, since an engine's error text may quote
	// the Authorization field it was sent. After a reload they include the
	// previous keyring's that this one no longer has (keepRetired).
	upstreamKeys []string
	// upstreamOwn are this keyring's tenants' upstream credentials, each
	// once: what the next reload keeps redacting (keepRetired).
	upstreamOwn []string
	// upIndex and upPrefixLens index upstreamKeys, when they are many
	// (indexUpstream); nil otherwise.
	upIndex      map[string][]int32
	upPrefixLens []int
}

// newKeyring validates the tenants and builds their keyring. An upstream
// credential taken from an environment variable is read here; an unset
// variable is an error.
func newKeyring(tenants []ratelimit.TenantConfig) (*Keyring, error) {
	if err := ratelimit.ValidateTenants(tenants); err != nil {
		return nil, err
	}
	kr := &Keyring{
		byPrefix: make(map[uint64][]int32),
	}
	var seen map[string]struct{} // the upstream credentials so far: a list's scan was quadratic
	for i := range tenants {
		tc := tenants[i]
		t := &Tenant{Name: tc.Name, SLO: tc.SLO, UpstreamKey: tc.Upstream.APIKey, Config: tc}
		if env := tc.Upstream.APIKeyEnv; env != "" {
			v, ok := os.LookupEnv(env)
			if !ok || v == "" {
				return nil, fmt.Errorf("tenants[%d].upstream.api_key_env: environment variable %s is not set", i, env)
			}
			t.UpstreamKey = v
		}
		// A credential from a file or a secret often ends in a line
		// break; one inside it would end the engine's Authorization
		// field and start another (the key is never quoted in the error).
		if err := ratelimit.CheckUpstreamKey(t.UpstreamKey); err != nil {
			return nil, fmt.Errorf("tenants[%d].upstream: %w", i, err)
		}
		t.UpstreamKey = strings.TrimSpace(t.UpstreamKey)
		kr.tenants = append(kr.tenants, t)
		if t.UpstreamKey != "" {
			if seen == nil {
				seen = make(map[string]struct{})
			}
			if _, dup := seen[t.UpstreamKey]; !dup {
				seen[t.UpstreamKey] = struct{}{}
				kr.upstreamOwn = append(kr.upstreamOwn, t.UpstreamKey)
			}
		}
		for _, k := range tc.Keys {
			var e keyEntry
			if _, err := hex.Decode(e.digest[:], []byte(strings.ToLower(k.SHA256))); err != nil {
				return nil, fmt.Errorf("tenant %s key %s: %w", tc.Name, k.ID, err) // unreachable after validation
			}
			e.info = KeyInfo{ID: k.ID, Tenant: t}
			kr.add(e)
		}
	}
	kr.upstreamKeys = slices.Clone(kr.upstreamOwn)
	kr.sortLongestFirst()
	return kr, nil
}

// sortLongestFirst sorts kr's redaction set longest first, and indexes it.
func (kr *Keyring) sortLongestFirst() {
	slices.SortFunc(kr.upstreamKeys, func(a, b string) int { return len(b) - len(a) })
	kr.indexUpstream()
}

// keepRetired adds to kr's redaction set the upstream credentials of prev,
// the keyring kr replaces, that kr's tenants no longer have: a request
// sent to the engine with one before the reload (a long stream) may come
// back quoting it after, and a credential rotated out is no less secret.
// One generation is kept: a credential retired by the reload before
// prev's is not (a request does not outlive two rotations but rarely).
func (kr *Keyring) keepRetired(prev *Keyring) {
	if len(prev.upstreamOwn) == 0 {
		return
	}
	own := make(map[string]struct{}, len(kr.upstreamOwn))
	for _, k := range kr.upstreamOwn {
		own[k] = struct{}{}
	}
	n := len(kr.upstreamKeys)
	for _, k := range prev.upstreamOwn {
		if _, ok := own[k]; !ok {
			kr.upstreamKeys = append(kr.upstreamKeys, k)
		}
	}
	if len(kr.upstreamKeys) > n {
		kr.sortLongestFirst()
	}
}

// add puts e in kr, found by the first 8 bytes of its digest.
func (kr *Keyring) add(e keyEntry) {
	p := binary.LittleEndian.Uint64(e.digest[:8])
	kr.byPrefix[p] = append(kr.byPrefix[p], int32(len(kr.entries)))
	kr.entries = append(kr.entries, e)
}

// lookup returns the key's owner. It does not allocate.
func (kr *Keyring) lookup(key []byte) (KeyInfo, bool) {
	if kr == nil || len(key) == 0 {
		return KeyInfo{}, false
	}
	sum := sha256.Sum256(key)
	for _, i := range kr.byPrefix[binary.LittleEndian.Uint64(sum[:8])] {
		e := &kr.entries[i]
		if subtle.ConstantTimeCompare(sum[:], e.digest[:]) == 1 {
			return e.info, true
		}
	}
	return KeyInfo{}, false
}

// Tenants returns the tenants, in configuration order. The slice must not be
// modified.
func (kr *Keyring) Tenants() []*Tenant {
	if kr == nil {
		return nil
	}
	return kr.tenants
}

// Len returns the number of keys.
func (kr *Keyring) Len() int {
	if kr == nil {
		return 0
	}
	return len(kr.entries)
}
