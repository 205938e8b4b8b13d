package identity

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"unsafe"

	"github.com/goodput/goodput/internal/keyshape"
)

// The store keeps only the SHA-256 of each key, so a key can be found in
// a value only by looking up the exact bytes that may be one. HoldsKey and
// RedactKeys look up a value's tokens, of two kinds:
//
//   - words: runs of anything but white space, quotes and , ; ( ) [ ] { }
//     < > (a key of the operator's own form, sent in x-api-key, may hold
//     any other character);
//   - runs of the characters a bearer token is made of (RFC 6750's
//     b64token: letters, digits and - . _ ~ + /, then = padding) inside a
//     word, so that "model:<key>", "key=<key>" or "<key>@org" find a key
//     made of those characters (an Authorization: Bearer key is).
//
// A key is found when it is the whole value or one of its tokens: standing
// alone, behind "Bearer ", in quotes, after a colon or an equals sign.
// Not found: a key glued to other token characters ("req-" + key, key +
// ".v2"), since a key may hold those characters itself and its length is
// not known (HoldsKey finds a whole NewKey key anywhere by its gp- prefix
// and known length), and a part of a key, which no hash can find (a
// fragment of a NewKey key is found by its shape: HoldsKeyShape). One part
// is found all the same: a NewKey key's 43 characters after its prefix,
// the whole of its secret, anywhere in a value, by looking up every 43
// characters of a long enough base64url run that hold letters of both
// cases, with the prefix put back (holdsKeyBody).

// maxTokenLookups bounds the tokens HoldsKey looks up in one value (each a
// SHA-256), and apart from them the places where a NewKey key could begin:
// a value with more of either counts as holding a key. Real model names
// and request ids have a few (none besides the whole value, mostly), and
// no place (a keyPrefix with keyLen characters from it) but a key's.
const maxTokenLookups = 64

// maxRedactLookups and maxRedactBytes bound what RedactKeys looks through
// of one text: the text is cut where either runs out.
const (
	maxRedactLookups = 256
	maxRedactBytes   = 4 << 10
)

// maxRedactOfBytes and maxRedactOfLookups are those bounds for each line
// of RedactKeysOf's text, the errors of a configuration check, which
// quote values whole: only a line longer than a value could sensibly be
// is cut.
const (
	maxRedactOfBytes   = 1 << 20
	maxRedactOfLookups = 1 << 16
)

// byteClass tells, for each byte, whether it belongs in a word (classWord)
// and whether it is one of b64token's characters but "=" (classToken).
var byteClass = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		if c > ' ' && c != 0x7f && !strings.ContainsRune("\"'`,;()[]{}<>", rune(c)) {
			t[c] |= classWord
		}
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-._~+/", rune(c)) {
			t[c] |= classToken
		}
		if keyshape.IsBase64URL(byte(c)) {
			t[c] |= classBase64URL
		}
	}
	return t
}()

const (
	classWord = 1 << iota
	classToken
	classBase64URL // a NewKey key's characters after its prefix
)

// isWordByte reports whether c belongs in a word (see above).
func isWordByte(c byte) bool { return byteClass[c]&classWord != 0 }

// isB64Token reports whether c is one of b64token's characters but "=".
func isB64Token(c byte) bool { return byteClass[c]&classToken != 0 }

// oneToken reports whether v is its only token: all of it b64token's
// characters (the common model name or request id), so that it is one
// word and one run.
func oneToken(v []byte) bool {
	for _, c := range v {
		if byteClass[c]&classToken == 0 {
			return false
		}
	}
	return true
}

// nextRun returns the bounds of the first b64token run in w at or after i
// (its characters, then any "=" padding); start == len(w) when none.
func nextRun(w []byte, i int) (start, end int) {
	for i < len(w) && !isB64Token(w[i]) {
		i++
	}
	start = i
	for i < len(w) && isB64Token(w[i]) {
		i++
	}
	for i < len(w) && w[i] == '=' {
		i++
	}
	return start, i
}

// nextWord returns the bounds of the first word in v at or after i; start
// == len(v) when none.
func nextWord(v []byte, i int) (start, end int) {
	for i < len(v) && !isWordByte(v[i]) {
		i++
	}
	start = i
	for i < len(v) && isWordByte(v[i]) {
		i++
	}
	return start, i
}

// HoldsKey reports whether v holds a whole key of the store, of any
// tenant: v itself, one of its tokens (see above: a key behind "Bearer ",
// in quotes, after a colon), or a key NewKey made anywhere in it (keyPrefix
// and the keyLen characters from it, whatever is around them), with or
// without its prefix. A value whose tokens, places where a NewKey key
// could begin, or places where one's part after the prefix could begin,
// are more than it looks up (64 of each) counts as holding one (FindKey
// tells the two apart). The common value, a model name or a request id without white
// space or punctuation, costs one lookup, as a lookup of the value alone
// would.
func (s *Store) HoldsKey(v []byte) bool { return s.FindKey(v) != NoKey }

// KeyFind is what FindKey found in a value.
type KeyFind uint8

const (
	// NoKey: v holds no key of the store.
	NoKey KeyFind = iota
	// KeyFound: v holds a whole key of the store.
	KeyFound
	// TooManyToLook: v has more tokens, or more places where a NewKey key
	// could begin, than are looked up (MaxKeyLookups of each); whether a
	// key is among the rest is not known.
	TooManyToLook
)

// MaxKeyLookups is how many tokens of a value, and apart from them how
// many places where a NewKey key could begin, FindKey looks up.
const MaxKeyLookups = maxTokenLookups

// FindKey is HoldsKey, telling a key found (KeyFound) from a value it did
// not look through whole (TooManyToLook).
func (s *Store) FindKey(v []byte) KeyFind {
	if len(v) == 0 {
		return NoKey
	}
	kr := s.Keyring()
	if _, ok := kr.lookup(v); ok {
		return KeyFound
	}
	if oneToken(v) {
		return kr.holdsNewKeyOrBody(v)
	}
	budget := maxTokenLookups
	look := func(t []byte) KeyFind {
		if budget--; budget < 0 {
			return TooManyToLook
		}
		if _, ok := kr.lookup(t); ok {
			return KeyFound
		}
		return NoKey
	}
	for i := 0; ; {
		ws, we := nextWord(v, i)
		if ws == len(v) {
			break
		}
		i = we
		w := v[ws:we]
		if len(w) < len(v) {
			if f := look(w); f != NoKey {
				return f
			}
		}
		for j := 0; ; {
			rs, re := nextRun(w, j)
			if rs == len(w) {
				break
			}
			j = re
			if re-rs < len(w) {
				if f := look(w[rs:re]); f != NoKey {
					return f
				}
			}
		}
	}
	return kr.holdsNewKeyOrBody(v)
}

// holdsNewKeyOrBody is holdsNewKey, then holdsKeyBody.
func (kr *Keyring) holdsNewKeyOrBody(v []byte) KeyFind {
	if f := kr.holdsNewKey(v); f != NoKey {
		return f
	}
	return kr.holdsKeyBody(v)
}

// holdsNewKey reports whether v holds a whole key of kr made by NewKey,
// with anything around it: each keyPrefix in v and the keyLen characters
// from it are looked up, at most maxTokenLookups of them; when v has more
// it is not looked through (TooManyToLook: a megabyte of "gp-" has
// 350,000, each a SHA-256).
func (kr *Keyring) holdsNewKey(v []byte) KeyFind {
	prefix := []byte(keyPrefix)
	budget := maxTokenLookups
	for i := 0; ; {
		j := bytes.Index(v[i:], prefix)
		if j < 0 || j+i+keyLen > len(v) {
			return NoKey // none, or none with keyLen characters left
		}
		j += i
		if budget--; budget < 0 {
			return TooManyToLook
		}
		if _, ok := kr.lookup(v[j : j+keyLen]); ok {
			return KeyFound
		}
		i = j + 1
	}
}

// bodyLen is the length of a NewKey key's part after keyPrefix: its 43
// base64url characters, the whole of its secret (the prefix is every
// key's).
const bodyLen = keyshape.BodyLen

// holdsKeyBody reports whether v holds, anywhere in it, the part after
// keyPrefix of a key of kr that NewKey made: each bodyLen characters of a
// run of base64url characters at least that long that hold letters of
// both cases (bodyScan) are looked up with the prefix put back, at most
// maxTokenLookups of them (TooManyToLook when v has more). A value whose
// runs are all shorter (a model name, a UUID), or of one case (a hex
// digest, a W3C trace id), costs a scan and no lookup.
func (kr *Keyring) holdsKeyBody(v []byte) KeyFind {
	if len(v) < bodyLen {
		return NoKey // the common model name or request id: no run that long
	}
	budget := maxTokenLookups
	for i := 0; ; {
		start, end := nextBase64URLRun(v, i)
		if start == len(v) {
			return NoKey
		}
		i = end
		for sc := newBodyScan(v, start, end); ; {
			w := sc.next()
			if w < 0 {
				break
			}
			if budget--; budget < 0 {
				return TooManyToLook
			}
			if kr.isKeyBody(v[w : w+bodyLen]) {
				return KeyFound
			}
		}
	}
}

// bodyScan walks the places in a run of base64url characters where the
// part of a NewKey key after its prefix could begin: each bodyLen
// characters that hold an upper-case and a lower-case letter, as every
// such part NewKey makes does (a random one lacks a case once in about
// 2.5 billion, and NewKey draws again).
type bodyScan struct {
	v      []byte
	w, end int // the next window is v[w:w+bodyLen], in v[:end]
	up, lo int // the letters of each case in it
}

func newBodyScan(v []byte, start, end int) bodyScan {
	sc := bodyScan{v: v, w: start, end: end}
	if end-start >= bodyLen {
		for _, c := range v[start : start+bodyLen] {
			sc.count(c, 1)
		}
	}
	return sc
}

func (sc *bodyScan) count(c byte, d int) {
	switch {
	case c >= 'A' && c <= 'Z':
		sc.up += d
	case c >= 'a' && c <= 'z':
		sc.lo += d
	}
}

// next returns where the next window to look up begins, or -1.
func (sc *bodyScan) next() int {
	for sc.w+bodyLen <= sc.end {
		w, mixed := sc.w, sc.up > 0 && sc.lo > 0
		sc.w++
		if sc.w+bodyLen <= sc.end {
			sc.count(sc.v[w], -1)
			sc.count(sc.v[w+bodyLen], 1)
		}
		if mixed {
			return w
		}
	}
	return -1
}

// mixedCase reports whether body (bodyLen characters) holds an upper-case
// and a lower-case letter: whether bodyScan would look it up.
func mixedCase(body string) bool {
	sc := newBodyScan([]byte(body), 0, len(body))
	return len(body) == bodyLen && sc.next() == 0
}

// isKeyBody reports whether keyPrefix followed by b (bodyLen bytes) is a
// key of kr.
func (kr *Keyring) isKeyBody(b []byte) bool {
	var k [keyLen]byte
	copy(k[copy(k[:], keyPrefix):], b)
	_, ok := kr.lookup(k[:])
	return ok
}

// nextBase64URLRun returns the bounds of the first run of base64url
// characters in v at or after i; start == len(v) when none.
func nextBase64URLRun(v []byte, i int) (start, end int) {
	for i < len(v) && byteClass[v[i]]&classBase64URL == 0 {
		i++
	}
	start = i
	for i < len(v) && byteClass[v[i]]&classBase64URL != 0 {
		i++
	}
	return start, i
}

// redacted replaces a key in RedactKeys' output.
const redacted = "[redacted]"

// RedactKeys returns text with every token that is a whole key of the
// store (see above), and every part after keyPrefix of a key of the store
// NewKey made (holdsKeyBody), replaced by "[redacted]": for text the
// gateway writes out that came from elsewhere (an engine's error message
// may quote the prompt, and the prompt may hold a key). Keys NewKey made,
// with their prefix, and their fragments are found by their shape
// (keyshape.Redact, which the gateway's messages go through first). It looks through the first 4 KiB
// of text and at most 256 tokens, and cuts the text, with "…", before the
// first word it did not look through whole (so no part of a key is left
// at the cut). It returns text itself, allocating nothing, when there is
// nothing to replace or cut.
func (s *Store) RedactKeys(text string) string {
	return s.Keyring().redactKeys(text, maxRedactBytes, maxRedactLookups)
}

// RedactUpstream returns text with every upstream credential of the
// tenants (their `upstream` api_key or api_key_env, and those the last
// reload rotated out) replaced by "[redacted]", wherever it is: an
// engine's error may quote the Authorization field it was sent. It
// returns text itself, allocating nothing, when there is none. A message
// goes through it before anything else looks at it: keyshape.Redact
// would cut a credential that holds a key's shape, and leave the rest of
// it in clear.
func (s *Store) RedactUpstream(text string) string {
	return s.Keyring().redactUpstream(text)
}

// redactUpstream returns text with every upstream credential of kr in it
// replaced by "[redacted]"; text itself when it holds none. It goes
// through text once, replacing at each place the longest credential that
// starts there, and never looks at what it wrote: a short credential
// found in "[redacted]" (one letter, "d") would otherwise have each
// replacement's letters replaced again by the next credential. With few
// credentials a search for each tells first whether there is one at all;
// with more, each place of text is looked up in an index of their first
// bytes (indexUpstream), so that an error's cost does not grow with the
// number of tenants (20,000 credentials made a 4 KiB message's
// redaction take 30 ms).
func (kr *Keyring) redactUpstream(text string) string {
	if len(kr.upstreamKeys) == 0 {
		return text
	}
	if kr.upIndex == nil {
		found := false
		for _, k := range kr.upstreamKeys {
			if strings.Contains(text, k) {
				found = true
				break
			}
		}
		if !found {
			return text
		}
	}
	var b strings.Builder
	last := 0 // text[:last] is in b
	for i := 0; i < len(text); {
		if n := kr.upstreamAt(text[i:]); n > 0 {
			b.WriteString(text[last:i])
			b.WriteString(redacted)
			i += n
			last = i
			continue
		}
		i++
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// upstreamAt returns the length of the longest upstream credential of kr
// that s starts with; 0 for none.
func (kr *Keyring) upstreamAt(s string) int {
	if kr.upIndex == nil {
		for _, k := range kr.upstreamKeys { // longest first
			if strings.HasPrefix(s, k) {
				return len(k)
			}
		}
		return 0
	}
	best := 0
	for _, l := range kr.upPrefixLens { // ascending
		if len(s) < l {
			break
		}
		for _, j := range kr.upIndex[s[:l]] { // longest first
			if k := kr.upstreamKeys[j]; len(k) > best && strings.HasPrefix(s, k) {
				best = len(k)
				break
			}
		}
	}
	return best
}

// upIndexMin is how many upstream credentials make redactUpstream look
// each place of a text up in an index (indexUpstream) rather than search
// for each credential (a search of a short message for one costs about a
// 70th of the message's look-ups, of a 4 KiB one about a 50th); upPrefix
// is how many of a credential's first bytes the index is keyed by.
const (
	upIndexMin = 64
	upPrefix   = 8
)

// indexUpstream builds kr's index of its upstream credentials (sorted
// longest first), when they are upIndexMin or more: by their first
// upPrefix bytes (a shorter one by all of it), each list longest first.
func (kr *Keyring) indexUpstream() {
	kr.upIndex, kr.upPrefixLens = nil, nil
	if len(kr.upstreamKeys) < upIndexMin {
		return
	}
	kr.upIndex = make(map[string][]int32)
	for j, k := range kr.upstreamKeys {
		p := k[:min(len(k), upPrefix)]
		if !slices.Contains(kr.upPrefixLens, len(p)) {
			kr.upPrefixLens = append(kr.upPrefixLens, len(p))
		}
		kr.upIndex[p] = append(kr.upIndex[p], int32(j))
	}
	slices.Sort(kr.upPrefixLens)
}

// RedactKeysOf is RedactKeys for the keys whose SHA-256 digests are
// given (64 hex digits each, as a configuration's sha256 fields hold them;
// others are skipped), with each line of text looked through on its own
// and whole: for the errors of a configuration check, which quote what
// they refuse, and may quote a key pasted into the wrong field of the file
// that holds its digest, with keyPrefix (keyshape.RedactWhole finds that)
// or without it. Not for a hot path: it builds the keyring at each call.
func RedactKeysOf(text string, digests []string) string {
	kr := &Keyring{byPrefix: map[uint64][]int32{}}
	for _, d := range digests {
		var e keyEntry
		if len(d) != 2*sha256.Size {
			continue
		}
		if _, err := hex.Decode(e.digest[:], []byte(d)); err != nil {
			continue
		}
		kr.add(e)
	}
	if kr.Len() == 0 {
		return text
	}
	lines := strings.SplitAfter(text, "\n")
	for i, l := range lines {
		lines[i] = kr.redactKeys(l, maxRedactOfBytes, maxRedactOfLookups)
	}
	return strings.Join(lines, "")
}

// redactKeys is RedactKeys with the keys of kr, looking through at most
// maxBytes of text and maxLookups of its tokens.
func (kr *Keyring) redactKeys(text string, maxBytes, maxLookups int) string {
	if kr.Len() == 0 || text == "" {
		return text
	}
	v := unsafe.Slice(unsafe.StringData(text), len(text)) // read only
	var b strings.Builder
	last := 0 // text[:last] is in b (or b is empty: nothing replaced yet)
	replace := func(start, end int) {
		b.WriteString(text[last:start])
		b.WriteString(redacted)
		last = end
	}
	budget := maxLookups
	lookUp := func(start, end int) bool {
		budget--
		if _, ok := kr.lookup(v[start:end]); ok {
			replace(start, end)
			return true
		}
		return false
	}
	for i := 0; ; {
		ws, we := nextWord(v, i)
		if ws == len(v) {
			break
		}
		i = we
		if budget == 0 || we > maxBytes {
			return cutAt(&b, text, last, ws)
		}
		if lookUp(ws, we) {
			continue
		}
		for j := ws; ; {
			rs, re := nextRun(v[:we], j)
			if rs == we {
				break
			}
			j = re
			if re-rs != we-ws { // else the word itself, looked up above
				if budget == 0 {
					return cutAt(&b, text, last, rs)
				}
				if lookUp(rs, re) {
					continue
				}
			}
			// The part of a NewKey key after its prefix, anywhere in the
			// run (holdsKeyBody).
			for k := rs; ; {
				bs, be := nextBase64URLRun(v[:re], k)
				if bs == re {
					break
				}
				k = be
				for sc := newBodyScan(v, bs, be); ; {
					w := sc.next()
					if w < 0 {
						break
					}
					if budget == 0 {
						return cutAt(&b, text, last, max(last, bs))
					}
					budget--
					if kr.isKeyBody(v[w : w+bodyLen]) {
						replace(w, w+bodyLen)
						sc = newBodyScan(v, w+bodyLen, be)
					}
				}
			}
		}
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// cutAt returns RedactKeys' output cut at text[at]: b, then text[last:at],
// then "…".
func cutAt(b *strings.Builder, text string, last, at int) string {
	b.WriteString(text[last:at])
	b.WriteString("…")
	return b.String()
}
