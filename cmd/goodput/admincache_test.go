package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The admin listener's costly answers are computed once per key and ttl,
// one computation at a time, and shared by the clients that ask meanwhile;
// the key holds the query and the exposition format asked for.
func TestAnswerCache(t *testing.T) {
	var computed atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := computed.Add(1)
		if n == 1 {
			close(started)
			<-release // the first computation is slow: the others wait for it
		}
		w.Header().Set("Content-Type", "text/plain; accept="+r.Header.Get("Accept"))
		if r.Method == http.MethodGet {
			w.Write([]byte(r.URL.RawQuery))
		}
	})
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	c := newAnswerCache(next, time.Second)
	c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	get := func(query, accept, method string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/metrics?"+query, nil)
		r.Header.Set("Accept", accept)
		w := httptest.NewRecorder()
		c.ServeHTTP(w, r)
		return w
	}
	var wg sync.WaitGroup
	answers := make(chan *httptest.ResponseRecorder, 8)
	ask := func() { defer wg.Done(); answers <- get("a", "x", http.MethodGet) }
	wg.Add(8)
	go ask()
	<-started
	// Seven more while the first computes: each waits for it on the lock,
	// or, come after, finds its answer (the clock stands still).
	for range 7 {
		go ask()
	}
	close(release)
	wg.Wait()
	close(answers)
	for w := range answers {
		if w.Code != 200 || w.Body.String() != "a" || w.Header().Get("Content-Length") != "1" {
			t.Fatalf("answer %d %q %v", w.Code, w.Body.String(), w.Header())
		}
	}
	if n := computed.Load(); n != 1 {
		t.Fatalf("%d computations for eight requests within the ttl", n)
	}
	if w := get("b", "x", http.MethodGet); w.Body.String() != "b" || computed.Load() != 2 {
		t.Fatalf("another query: %q, %d computations", w.Body.String(), computed.Load())
	}
	if w := get("a", "y", http.MethodGet); w.Header().Get("Content-Type") != "text/plain; accept=y" || computed.Load() != 3 {
		t.Fatalf("another format: %v, %d computations", w.Header(), computed.Load())
	}
	if w := get("a", "x", http.MethodHead); w.Body.Len() != 0 || w.Header().Get("Content-Length") != "1" || computed.Load() != 3 {
		t.Fatalf("HEAD: %q %v, %d computations (the GET's answer serves it)", w.Body.String(), w.Header(), computed.Load())
	}
	if w := get("a", "x", http.MethodDelete); w.Code != http.StatusMethodNotAllowed || computed.Load() != 3 {
		t.Fatalf("DELETE: %d, %d computations", w.Code, computed.Load())
	}
	// A HEAD first computes the GET's answer, which a GET then gets.
	if w := get("h", "x", http.MethodHead); w.Body.Len() != 0 || computed.Load() != 4 {
		t.Fatalf("HEAD first: %q, %d computations", w.Body.String(), computed.Load())
	}
	if w := get("h", "x", http.MethodGet); w.Body.String() != "h" || computed.Load() != 4 {
		t.Fatalf("GET after a HEAD: %q, %d computations", w.Body.String(), computed.Load())
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	if get("a", "x", http.MethodGet); computed.Load() != 5 {
		t.Fatalf("after the ttl: %d computations, want a new one", computed.Load())
	}
	// Keys made up per call do not grow the cache without bound.
	for i := range 3 * answerCacheKeys {
		get("k"+strconv.Itoa(i), "x", http.MethodGet)
	}
	if n := len(c.answers); n > answerCacheKeys {
		t.Fatalf("%d keys kept", n)
	}
}
