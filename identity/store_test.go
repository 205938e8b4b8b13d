package identity

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goodput/goodput/ratelimit"
)

type recordingSetter struct {
	mu    sync.Mutex
	calls [][]string
}

func (r *recordingSetter) SetTenants(_ time.Time, ts []ratelimit.TenantConfig) {
	var names []string
	for _, t := range ts {
		names = append(names, t.Name)
	}
	r.mu.Lock()
	r.calls = append(r.calls, names)
	r.mu.Unlock()
}

func TestStoreReload(t *testing.T) {
	sub := &recordingSetter{}
	s, err := NewStore(testTenants(), sub)
	if err != nil {
		t.Fatal(err)
	}
	inflight, ok := s.Lookup([]byte("foo"))
	if !ok {
		t.Fatal("foo unknown")
	}

	// An invalid list is rejected and changes nothing.
	bad := testTenants()
	bad[0].Keys[0].SHA256 = "nothex"
	err = s.Reload(bad, nil)
	if err == nil || !strings.Contains(err.Error(), "keeping the previous 2 keys") || !strings.Contains(err.Error(), "tenants[0].keys[0].sha256") {
		t.Fatalf("err = %v", err)
	}
	if _, ok := s.Lookup([]byte("foo")); !ok {
		t.Fatal("old key lost after an invalid reload")
	}
	if len(sub.calls) != 1 {
		t.Fatalf("subscriber called %d times, want 1 (invalid reloads are not passed on)", len(sub.calls))
	}

	// A valid list replaces the keys; what a request in flight holds is unchanged.
	next := []ratelimit.TenantConfig{{Name: "gamma", Keys: []ratelimit.KeyConfig{{ID: "g1", SHA256: hashKey("baz")}}}}
	if err := s.Reload(next, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lookup([]byte("foo")); ok {
		t.Error("removed key still accepted")
	}
	if info, ok := s.Lookup([]byte("baz")); !ok || info.Tenant.Name != "gamma" {
		t.Errorf("new key: %+v %v", info, ok)
	}
	if inflight.Tenant.Name != "acme" || inflight.Tenant.UpstreamKey != "sk-upstream" || inflight.ID != "acme-prod" {
		t.Errorf("in-flight key info changed: %+v", inflight)
	}
	if len(sub.calls) != 2 || sub.calls[1][0] != "gamma" {
		t.Errorf("subscriber calls: %v", sub.calls)
	}
}

func TestStoreReloadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("tenants:\n  - name: acme\n    keys: [{id: k1, sha256: \"" + hashA + "\"}]\n")
	ts, err := LoadTenantsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStore(ts)
	if err != nil {
		t.Fatal(err)
	}
	write("tenants:\n  - name: acme\n    keys: [{id: k1, sha256: \"" + hashB + "\"}]\n    limits: {rpm: -1}\n")
	if err := s.reloadFile(path); err == nil || !strings.Contains(err.Error(), "tenants[0].limits.rpm") || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v", err)
	}
	if _, ok := s.Lookup([]byte("foo")); !ok {
		t.Fatal("old key lost")
	}
	write("tenants:\n  - name: acme\n    keys: [{id: k1, sha256: \"" + hashB + "\"}]\n")
	if err := s.reloadFile(path); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lookup([]byte("bar")); !ok {
		t.Fatal("new key not loaded")
	}
}

// watcher runs a FileWatch of path with polls the test drives: poll(n) makes
// n polls and returns once they are done. It stops at cleanup.
func watcher(t *testing.T, path string, load func() error, notes ...func()) (poll func(n int)) {
	t.Helper()
	return seenWatcher(t, path, nil, load, notes...)
}

// seenWatcher is watcher with seen marked by the test's own reloads.
func seenWatcher(t *testing.T, path string, seen *Seen, load func() error, notes ...func()) (poll func(n int)) {
	t.Helper()
	w := FileWatch{Path: path, Seen: seen, Load: load}
	if len(notes) > 0 {
		w.Unsettled = notes[0]
	}
	if len(notes) > 1 {
		w.Gone = notes[1]
	}
	return runWatch(t, w)
}

// runWatch runs w with polls the test drives (see watcher).
func runWatch(t *testing.T, w FileWatch) (poll func(n int)) {
	t.Helper()
	ticks := make(chan time.Time)
	polled := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	w.Polled = func() { polled <- struct{}{} }
	go func() {
		defer close(done)
		w.run(ctx, ticks)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return func(n int) {
		for range n {
			ticks <- time.Time{}
			<-polled
		}
	}
}

func TestWatchFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(path, []byte("v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	var loads atomic.Int32
	var fail atomic.Bool
	poll := watcher(t, path, func() error {
		loads.Add(1)
		if fail.Load() {
			return os.ErrInvalid
		}
		return nil
	})
	want := func(n int32, when string) {
		t.Helper()
		if got := loads.Load(); got != n {
			t.Fatalf("%s: %d loads, want %d", when, got, n)
		}
	}
	poll(3)
	want(0, "no change")
	// Touching without changing the content is not a change.
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, future, future); err != nil {
		t.Fatal(err)
	}
	poll(3) // polls 4-6
	want(0, "after a touch")
	// Same size, same modification time, new content: found by the hash
	// every tenth poll, and loaded at the next, once it has settled.
	if err := os.WriteFile(path, []byte("v2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, future, future); err != nil {
		t.Fatal(err)
	}
	poll(3) // polls 7-9: size and time unchanged, no hash
	want(0, "before the tenth poll")
	poll(1) // 10: hashed, seen once
	want(0, "new content seen once")
	poll(1) // 11: the same again, loaded
	want(1, "new content seen twice")
	// A rejected content is not retried until it changes.
	fail.Store(true)
	if err := os.WriteFile(path, []byte("v3 bad"), 0o600); err != nil {
		t.Fatal(err)
	}
	poll(2)
	want(2, "a new size")
	poll(25) // past two periodic hashes
	want(2, "a rejected content")
	// A missing file is skipped; its return is a change.
	fail.Store(false)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	poll(3)
	want(2, "file missing")
	if err := os.WriteFile(path, []byte("v4"), 0o600); err != nil {
		t.Fatal(err)
	}
	poll(2)
	want(3, "file back")
}

// A FileWatch, on a real ticker, notices a change and stops when its context
// ends.
func TestWatchFileTicker(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, []byte("v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		FileWatch{Path: path, Interval: time.Millisecond, Load: func() error {
			select {
			case loaded <- struct{}{}:
			default:
			}
			return nil
		}}.Run(ctx)
	}()
	// A FileWatch takes the content present when it starts as loaded, and
	// nothing says when it has started: write new contents until one is
	// loaded.
	deadline := time.After(10 * time.Second)
	for i := 2; ; i++ {
		if err := os.WriteFile(path, []byte(fmt.Sprintf("v%d", i)), 0o600); err != nil {
			t.Fatal(err)
		}
		select {
		case <-loaded:
		case <-time.After(50 * time.Millisecond):
			continue
		case <-deadline:
			t.Fatal("no change loaded within 10s")
		}
		break
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("FileWatch.Run did not return after cancel")
	}
}

// stampedWriter writes path, each write with a modification time of its
// own: writes in one tick of the file system's clock share one, and a
// watch that finds the time and size it had does not read the file (a
// test's writes of one size came out unseen).
func stampedWriter(t *testing.T, path string) func(string) {
	mtime := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func(s string) {
		t.Helper()
		mtime = mtime.Add(time.Second)
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
}

// loadsInto is a load that appends the file's content to loads.
func loadsInto(path string, loads *[]string) func() error {
	return func() error {
		b, _ := os.ReadFile(path)
		*loads = append(*loads, string(b))
		return nil
	}
}

// A change a SIGHUP has loaded is not loaded again when the watch sees it
// (an edit then a SIGHUP was loaded twice, a second apart); one it has not
// still is, also one the file goes back to after the watch loaded another.
func TestWatchFileTakesWhatASIGHUPRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	write := stampedWriter(t, path)
	write("v1")
	var seen Seen
	var loads []string
	poll := seenWatcher(t, path, &seen, loadsInto(path, &loads))
	want := func(when string, w ...string) {
		t.Helper()
		if fmt.Sprint(loads) != fmt.Sprint(w) {
			t.Fatalf("%s: loads %q, want %q", when, loads, w)
		}
	}
	poll(1)
	write("v2 edited")
	seen.Mark(path) // the SIGHUP's reload reads it
	poll(3)
	want("after an edit and a SIGHUP")
	// The watch saw it once before the SIGHUP came.
	write("v3 edited")
	poll(1)
	seen.Mark(path)
	poll(3)
	want("after an edit seen once, then a SIGHUP")
	// A SIGHUP's mark of a content then changed before the watch saw it.
	seen.Mark(path)
	write("v4")
	poll(2)
	want("a content the SIGHUP did not read", "v4")
	// A mark of v6 (a SIGHUP whose read then found v5), v5 loaded by the
	// watch, then v6: the mark is older than what is loaded.
	write("v6")
	seen.Mark(path)
	write("v5")
	poll(2)
	write("v6")
	poll(2)
	want("a content marked before another was loaded", "v4", "v5", "v6")
}

// A SIGHUP's mark of a content the file then left, back to the content the
// watch holds as loaded, before the reload read it: the reload loaded what
// the watch holds, and the watch saw nothing new. The content marked, when
// the file comes to it later, is a change like any other: it was taken as
// loaded and never was (the tenants stayed the old ones).
func TestWatchFileMarkLeftBeforeTheRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	write := stampedWriter(t, path)
	write("v1")
	var seen Seen
	var loads []string
	poll := seenWatcher(t, path, &seen, loadsInto(path, &loads))
	poll(1)
	write("v2 edited")
	seen.Mark(path)
	write("v1") // the SIGHUP's reload reads v1, which the watch holds
	poll(2)
	if len(loads) != 0 {
		t.Fatalf("back to the content loaded: loads %q", loads)
	}
	write("v2 edited")
	poll(2)
	if fmt.Sprint(loads) != fmt.Sprint([]string{"v2 edited"}) {
		t.Fatalf("v2 written after a reload that read v1: loads %q, want [v2 edited]", loads)
	}
}

// A file caught half written is not loaded: a new content must stay the same
// for one more poll.
func TestWatchFileWaitsForAWriteToSettle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(path, []byte("tenants: [a, b, c]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var loaded []string
	poll := watcher(t, path, func() error {
		b, _ := os.ReadFile(path)
		loaded = append(loaded, string(b))
		return nil
	})
	poll(1)
	// Written in two steps, as an editor without atomic saves does, with a
	// poll between them.
	for i := 0; i < 5; i++ {
		full := fmt.Sprintf("tenants: [a, b, c, d%d]\n", i)
		if err := os.WriteFile(path, []byte(full[:9]), 0o600); err != nil {
			t.Fatal(err)
		}
		poll(1)
		if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
			t.Fatal(err)
		}
		poll(1)
		if len(loaded) != i {
			t.Fatalf("write %d: loaded before it settled: %q", i, loaded)
		}
		poll(1)
		if len(loaded) != i+1 || loaded[i] != full {
			t.Fatalf("write %d: loads %q, want the full content last", i, loaded)
		}
	}
}

// reloadFile is Reload with LoadTenantsFile(path).
func (s *Store) reloadFile(path string) error {
	tenants, err := LoadTenantsFile(path)
	if err != nil {
		return fmt.Errorf("identity: reload rejected, keeping the previous %d keys: %w", s.Keyring().Len(), err)
	}
	return s.Reload(tenants, nil)
}

// LoadTenantsFile parses the file once (the first document, then what
// follows it) and reads as before: an empty or comment-only file is no
// tenants, a second document is refused with its line, a bad value names
// its field.
func TestLoadTenantsFileOneParse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	for _, c := range []struct{ src, want string }{
		{"", ""},
		{"# none yet\n", ""},
		{"tenants:\n  - name: acme\n    keys: []\n---\n", ""},
		{"tenants:\n  - name: acme\n    keys: []\n---\ntenants:\n  - name: beta\n", "line 4: a second YAML document"},
		{"tenants:\n  - name: acme\n    limits: {rpm: lots}\n", "line 3"},
		// Not a tenants file, or a typo in its one key: read as no
		// tenants, it made every key unknown (a new user's probe).
		{"tenant:\n  - name: acme\n", `line 1: unknown key "tenant"`},
		{"tenants:\n  - name: acme\n    keys: []\nfoo: 1\n", `line 4: unknown key "foo"`},
		{"root:*:19000:0:99999:7:::\n", "unknown key"},
	} {
		if err := os.WriteFile(path, []byte(c.src), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadTenantsFile(path)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%q: %v, want %q", c.src, err, c.want)
		}
	}
}

// A content that differs at every poll (a tool rewriting the file each
// second with a timestamp) is never loaded, half written as it may be, and
// that wait is reported once it has lasted UnsettledPolls polls, once until
// the file settles: nothing said so, and the operator saw no reload.
func TestWatchFileReportsAFileThatNeverSettles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, []byte("v0"), 0o600); err != nil {
		t.Fatal(err)
	}
	var loads, reports atomic.Int32
	poll := watcher(t, path, func() error { loads.Add(1); return nil }, func() { reports.Add(1) })
	poll(1) // the watcher has read the file as it starts
	v := 0
	rewrite := func(n int) {
		for range n {
			v++
			if err := os.WriteFile(path, []byte(fmt.Sprintf("generated at %d", v)), 0o600); err != nil {
				t.Fatal(err)
			}
			poll(1)
		}
	}
	rewrite(UnsettledPolls - 1)
	if loads.Load() != 0 || reports.Load() != 0 {
		t.Fatalf("after %d changing polls: %d loads, %d reports, want none", UnsettledPolls-1, loads.Load(), reports.Load())
	}
	rewrite(1)
	if reports.Load() != 1 {
		t.Fatalf("after %d changing polls: %d reports, want 1", UnsettledPolls, reports.Load())
	}
	rewrite(2 * UnsettledPolls)
	if loads.Load() != 0 || reports.Load() != 1 {
		t.Fatalf("still changing: %d loads, %d reports, want 0 and 1", loads.Load(), reports.Load())
	}
	poll(1) // the file stays as it is: loaded
	if loads.Load() != 1 {
		t.Fatalf("settled: %d loads, want 1", loads.Load())
	}
	rewrite(UnsettledPolls) // a new episode is reported again
	if reports.Load() != 2 {
		t.Fatalf("a second episode: %d reports, want 2", reports.Load())
	}
}

// A watched file that is deleted is said once, and again only after it was
// back (a tenants file removed went unsaid); the tenants loaded stay, and
// the file put back is loaded as any change.
func TestWatchFileSaysWhenTheFileIsGone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(path, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	loads, gone := 0, 0
	poll := watcher(t, path, func() error { loads++; return nil }, nil, func() { gone++ })
	poll(1)
	os.Remove(path)
	poll(3)
	if gone != 1 || loads != 0 {
		t.Fatalf("after the delete: gone said %d times, loads %d; want once, none", gone, loads)
	}
	if err := os.WriteFile(path, []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	poll(2)
	if loads != 1 {
		t.Fatalf("the file put back: %d loads, want 1", loads)
	}
	os.Remove(path)
	poll(1)
	if gone != 2 {
		t.Fatalf("deleted again: gone said %d times, want 2", gone)
	}
}

// An edit and a SIGHUP that come while a poll has read the content the
// watch holds as loaded, before it decides: the SIGHUP's mark is of a
// content newer than that read, and is kept for the next poll, which takes
// it (dropped as stale, the watch loaded the edit a second time).
func TestWatchFileKeepsAMarkMadeAfterItsRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	write := stampedWriter(t, path)
	write("v1")
	var seen Seen
	var loads []string
	sighup := false // the watch's goroutine reads it between the test's polls
	poll := runWatch(t, FileWatch{Path: path, Seen: &seen,
		Load: func() error {
			b, _ := os.ReadFile(path)
			loads = append(loads, string(b))
			return nil
		},
		hashed: func() {
			if sighup {
				sighup = false
				write("v2 edited")
				seen.Mark(path) // the SIGHUP's reload reads it
			}
		}})
	poll(1)
	// Each tenth poll reads the file whatever its time and size say: the
	// watch is at poll 1, so poll 10 reads v1, the content it holds.
	poll(8)
	sighup = true
	poll(1)
	poll(3)
	if len(loads) != 0 {
		t.Fatalf("an edit and a SIGHUP after a poll's read: loads %q, want none (the SIGHUP loaded it)", loads)
	}
}
