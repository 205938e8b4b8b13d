package identity

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/regfile"
	"github.com/goodput/goodput/ratelimit"
	"go.yaml.in/yaml/v3"
)

// TenantSetter is anything that must follow the tenant configuration: the
// limiters, the Gate, the Metrics. SetTenants is called with a validated list
// and must not fail; now is the time of the change (limiters use it to carry
// bucket state over to the new limits).
type TenantSetter interface {
	SetTenants(now time.Time, tenants []ratelimit.TenantConfig)
}

// Store holds the current Keyring and swaps it atomically on reload, so that
// requests in flight keep the tenant and key they authenticated with, and new
// requests see the new keys. It is safe for concurrent use.
type Store struct {
	mu   sync.Mutex // serialises reloads
	cur  atomic.Pointer[Keyring]
	subs []TenantSetter
	now  func() time.Time
}

// NewStore validates the tenants, builds their keyring and passes the list to
// each subscriber (typically the Gate).
func NewStore(tenants []ratelimit.TenantConfig, subs ...TenantSetter) (*Store, error) {
	kr, err := newKeyring(tenants)
	if err != nil {
		return nil, err
	}
	s := &Store{subs: subs, now: time.Now}
	s.publish(kr, tenants, nil)
	return s, nil
}

// Reload replaces the tenants and keys. An invalid list (or an upstream
// credential variable that is not set) leaves everything as it was and returns
// the reason, which names the field path. accepted, if not nil, is called
// once the list is accepted, just before the subscribers and the keys
// change: a reload publishes there what must follow the tenants but is not
// a subscriber (the SLO judge's classes), so that nothing is published of a
// configuration the store then refuses.
func (s *Store) Reload(tenants []ratelimit.TenantConfig, accepted func()) error {
	kr, err := newKeyring(tenants)
	if err != nil {
		return fmt.Errorf("identity: reload rejected, keeping the previous %d keys: %w", s.Keyring().Len(), err)
	}
	s.publish(kr, tenants, accepted)
	return nil
}

// LoadTenantsFile reads the `tenants:` section of a YAML file (a dedicated key
// file or the main configuration) and validates it. It is what a reload calls.
func LoadTenantsFile(path string) ([]ratelimit.TenantConfig, error) {
	data, err := regfile.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Tenants []ratelimit.TenantConfig `yaml:"tenants"`
	}
	if err := cfgtypes.CheckDocument(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, cfgtypes.NameField(data, err))
	}
	// One parse: the first document, then what follows it (a second one
	// is refused). An empty file is no tenants, as yaml.Unmarshal has it;
	// a key other than tenants (a typo, tenant:, or a file that is not a
	// tenants file at all) is an error, as in the configuration: read as
	// no tenants, it made every key unknown.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, fmt.Errorf("%s: %w", path, cfgtypes.NameField(data, cfgtypes.CleanYAMLError(err)))
	default:
		if err := cfgtypes.NextDocument(dec); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := ratelimit.ValidateTenants(doc.Tenants); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return doc.Tenants, nil
}

func (s *Store) publish(kr *Keyring, tenants []ratelimit.TenantConfig, accepted func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if accepted != nil {
		accepted()
	}
	// Limiters learn about new tenants before any key maps to them.
	now := s.now()
	for _, sub := range s.subs {
		sub.SetTenants(now, tenants)
	}
	if prev := s.cur.Load(); prev != nil {
		kr.keepRetired(prev)
	}
	s.cur.Store(kr)
}

// Keyring returns the current keyring.
func (s *Store) Keyring() *Keyring { return s.cur.Load() }

// Lookup resolves a gateway key with the current keyring.
func (s *Store) Lookup(key []byte) (KeyInfo, bool) { return s.cur.Load().lookup(key) }

// FileWatch polls a file and calls Load when its content has changed. A
// change is noticed from the modification time and the size, and confirmed
// by the SHA-256 of the content (which is also compared every tenth poll
// regardless, for edits that keep both). A new content is loaded once it
// has stayed the same for one more poll: a file that is being written
// (truncated, then filled) could otherwise be loaded half written, and half
// a tenants list can be valid YAML that drops tenants. A file that cannot
// be read is skipped until it can. A content that Load rejected is not
// retried until it changes again; Load should log its error. A file whose
// content differs at every poll (a tool that rewrites it each second with
// a timestamp) is never loaded. Run it after the initial load: the content
// present when it starts is taken as already loaded.
type FileWatch struct {
	Path string
	// Interval is the time between polls; zero means 1s.
	Interval time.Duration
	Load     func() error
	// Unsettled, if not nil, is called once the content has differed at
	// UnsettledPolls polls in a row, once until it settles, so that the
	// wait can be logged (it was silent).
	Unsettled func()
	// Gone, if not nil, is called when the file is found missing, once
	// until it is there again (a tenants file deleted went unsaid: the
	// tenants loaded stay).
	Gone func()
	// Seen, if not nil, holds a content a reload of the caller's own (a
	// SIGHUP) has read: the watch takes it as loaded.
	Seen *Seen
	// Polled, if not nil, is called after each poll (tests wait on it).
	Polled func()
	// hashed, if not nil, is called as a poll has read the file, before
	// it decides (tests mark there).
	hashed func()
}

// Run polls until ctx is done.
func (w FileWatch) Run(ctx context.Context) {
	interval := w.Interval
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	w.run(ctx, t.C)
}

// Seen is a file's content as a reload other than a FileWatch's last read
// it.
// An edit followed by a SIGHUP was loaded twice: by the SIGHUP, and again a
// second later when the watch saw the change. The zero Seen holds nothing;
// it is safe for concurrent use.
type Seen struct {
	mu  sync.Mutex
	sum [sha256.Size]byte
	ok  bool
	gen uint64 // marks made
}

// Mark notes path's content as it is now. Call it before the reload reads
// path: a change made between the two is then loaded again by the watch
// (once more than needed), where marked after the read it would be taken
// as loaded and never be. It returns the content's SHA-256, and whether
// the file could be read.
func (s *Seen) Mark(path string) (sum [sha256.Size]byte, ok bool) {
	data, err := regfile.ReadFile(path)
	sum, ok = sha256.Sum256(data), err == nil
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sum, s.ok = sum, ok
	s.gen++
	return sum, ok
}

// marks returns how many marks have been made (0 for a nil Seen).
func (s *Seen) marks() uint64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// take reports whether h is the content marked; one taken is forgotten (the
// watch now holds it as loaded).
func (s *Seen) take(h [sha256.Size]byte) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ok && s.sum == h {
		s.ok = false
		return true
	}
	return false
}

// forget drops the content marked: the watch loads a newer one.
func (s *Seen) forget() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.ok = false
	s.mu.Unlock()
}

// forgetOlder drops the content marked if it was marked before the
// marks() that returned gen: one marked since is of a content newer than
// the watch's read.
func (s *Seen) forgetOlder(gen uint64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.gen <= gen {
		s.ok = false
	}
	s.mu.Unlock()
}

// UnsettledPolls is how many polls in a row a file's content must differ
// at before a FileWatch calls Unsettled.
const UnsettledPolls = 10

// run is Run polling at every receive from tick.
func (w FileWatch) run(ctx context.Context, tick <-chan time.Time) {
	path, seen, load, unsettled, gone := w.Path, w.Seen, w.Load, w.Unsettled, w.Gone
	var (
		mod     time.Time
		size    int64             = -1
		sum     [sha256.Size]byte // the content loaded (or present at start)
		have    bool              // sum is set
		next    [sha256.Size]byte // a new content seen once, loaded if seen again
		pending bool              // next is set
		changes int               // polls in a row that saw a new content
	)
	hash := func() ([sha256.Size]byte, bool) {
		data, err := regfile.ReadFile(path)
		if err != nil {
			return [sha256.Size]byte{}, false
		}
		return sha256.Sum256(data), true
	}
	if fi, err := os.Stat(path); err == nil {
		mod, size = fi.ModTime(), fi.Size()
		sum, have = hash()
	}
	missing := false
	poll := func(n int) {
		fi, err := os.Stat(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && !missing {
				missing = true
				if gone != nil {
					gone()
				}
			}
			return
		}
		missing = false
		if fi.ModTime().Equal(mod) && fi.Size() == size && n%10 != 0 && have && !pending {
			return
		}
		mod, size = fi.ModTime(), fi.Size()
		marks := seen.marks()
		h, ok := hash()
		if w.hashed != nil {
			w.hashed()
		}
		switch {
		case !ok:
		case have && h == sum:
			pending, changes = false, 0 // back to what is loaded
			// A mark made before this read is of this content (a reload
			// of the file unchanged), or of one the file left before the
			// reload read it: kept, the file coming to that one later
			// would pass for loaded, and never be. One made since (an
			// edit and a SIGHUP after the read) is kept for the next poll.
			seen.forgetOlder(marks)
		case seen.take(h):
			// A SIGHUP has loaded it (or refused it) already.
			sum, have, pending, changes = h, true, false, 0
		case pending && h == next:
			sum, have, pending, changes = h, true, false, 0
			// A mark older than this content (a file changed between a
			// SIGHUP's mark and its read, then changed back) must not
			// later pass for what is loaded.
			seen.forget()
			_ = load()
		default:
			next, pending = h, true
			if changes++; changes == UnsettledPolls && unsettled != nil {
				unsettled()
			}
		}
	}
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		poll(n)
		if w.Polled != nil {
			w.Polled()
		}
	}
}
