package ratelimit

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
)

type recordingSetter struct {
	mu    sync.Mutex
	calls [][]string
}

func (r *recordingSetter) SetTenants(_ time.Time, ts []TenantConfig) {
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
	err = s.Reload(bad)
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
	next := []TenantConfig{{Name: "gamma", Keys: []KeyConfig{{ID: "g1", SHA256: HashKey("baz")}}}}
	if err := s.Reload(next); err != nil {
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
	if err := s.ReloadFile(path); err == nil || !strings.Contains(err.Error(), "tenants[0].limits.rpm") || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v", err)
	}
	if _, ok := s.Lookup([]byte("foo")); !ok {
		t.Fatal("old key lost")
	}
	write("tenants:\n  - name: acme\n    keys: [{id: k1, sha256: \"" + hashB + "\"}]\n")
	if err := s.ReloadFile(path); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lookup([]byte("bar")); !ok {
		t.Fatal("new key not loaded")
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		WatchFile(ctx, path, 5*time.Millisecond, func() error {
			loads.Add(1)
			if fail.Load() {
				return os.ErrInvalid
			}
			return nil
		})
		close(done)
	}()
	waitFor := func(n int32) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for loads.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("load called %d times, want %d", loads.Load(), n)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	time.Sleep(30 * time.Millisecond)
	if loads.Load() != 0 {
		t.Fatal("load called without a change")
	}
	// Touching without changing the content is not a change.
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, future, future); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if loads.Load() != 0 {
		t.Fatal("load called after a touch")
	}
	// Same size, same modification time, new content: found by the periodic hash.
	if err := os.WriteFile(path, []byte("v2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, future, future); err != nil {
		t.Fatal(err)
	}
	waitFor(1)
	// A rejected content is not retried until it changes.
	fail.Store(true)
	if err := os.WriteFile(path, []byte("v3 bad"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(2)
	time.Sleep(120 * time.Millisecond) // more than ten polls
	if n := loads.Load(); n != 2 {
		t.Fatalf("rejected content retried: %d loads", n)
	}
	// A missing file is skipped; its return is a change.
	fail.Store(false)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if err := os.WriteFile(path, []byte("v4"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(3)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("WatchFile did not return after cancel")
	}
}

// A file caught half written is not loaded: a new content must stay the same
// for one more poll.
func TestWatchFileWaitsForAWriteToSettle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(path, []byte("tenants: [a, b, c]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var loaded []string
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		WatchFile(ctx, path, 20*time.Millisecond, func() error {
			b, _ := os.ReadFile(path)
			mu.Lock()
			loaded = append(loaded, string(b))
			mu.Unlock()
			return nil
		})
	}()
	time.Sleep(30 * time.Millisecond)
	// Written in two steps 2 ms apart, as an editor without atomic saves does.
	for i := 0; i < 5; i++ {
		full := fmt.Sprintf("tenants: [a, b, c, d%d]\n", i)
		if err := os.WriteFile(path, []byte(full[:9]), 0o600); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
		if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
			t.Fatal(err)
		}
		time.Sleep(80 * time.Millisecond)
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(loaded) != 5 {
		t.Fatalf("%d loads, want 5: %q", len(loaded), loaded)
	}
	for i, l := range loaded {
		if want := fmt.Sprintf("tenants: [a, b, c, d%d]\n", i); l != want {
			t.Fatalf("load %d saw %q, want %q", i, l, want)
		}
	}
}
