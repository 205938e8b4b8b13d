package main

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/config"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	c := newAnswerCache(next, time.Second, true)
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
	// An answer past its ttl is dropped when another is kept: only the
	// one just computed is held.
	if n := len(c.answers); n != 1 || c.bytes != 1 {
		t.Fatalf("%d answers (%d bytes) kept after the ttl, want the one just computed", n, c.bytes)
	}
	// Keys made up per call do not grow the cache without bound.
	for i := range 3 * answerCacheKeys {
		get("k"+strconv.Itoa(i), "x", http.MethodGet)
	}
	if n := len(c.answers); n > answerCacheKeys {
		t.Fatalf("%d keys kept", n)
	}
}

// The cache holds at most answerCacheBytes of answers: past it the others
// are dropped when one more is kept.
func TestAnswerCacheBytes(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, 600))
	})
	c := newAnswerCache(next, time.Hour, true)
	c.max = 1000
	for _, q := range []string{"a", "b", "c"} {
		c.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/x?"+q, nil))
		if len(c.answers) != 1 || c.bytes != 600 {
			t.Fatalf("after %s: %d answers, %d bytes", q, len(c.answers), c.bytes)
		}
	}
}

// Through promhttp: a gzip answer goes only to a client that accepts
// gzip, an identity one to the others, and a HEAD gets the GET's head;
// /metrics's answer does not depend on the query.
func TestAnswerCacheMetricsEncodings(t *testing.T) {
	reg := prometheus.NewRegistry()
	n := prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"})
	reg.MustRegister(n)
	c := newAnswerCache(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), time.Hour, false)
	get := func(method, query, enc string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/metrics"+query, nil)
		if enc != "" {
			r.Header.Set("Accept-Encoding", enc)
		}
		w := httptest.NewRecorder()
		c.ServeHTTP(w, r)
		return w
	}
	plain := get(http.MethodGet, "", "")
	if plain.Header().Get("Content-Encoding") != "" || !strings.Contains(plain.Body.String(), "x_total 0") {
		t.Fatalf("identity: %v %q", plain.Header(), plain.Body.String())
	}
	zipped := get(http.MethodGet, "", "gzip")
	zippedLen := zipped.Body.Len()
	if zipped.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip asked: %v", zipped.Header())
	}
	zr, err := gzip.NewReader(zipped.Body)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(zr); !strings.Contains(string(b), "x_total 0") {
		t.Fatalf("gzip body: %q", b)
	}
	n.Inc()
	if w := get(http.MethodGet, "?made-up=1", ""); w.Body.String() != plain.Body.String() || w.Header().Get("Content-Encoding") != "" {
		t.Fatalf("a made-up query within the ttl: %v %q", w.Header(), w.Body.String())
	}
	if w := get(http.MethodHead, "", "gzip"); w.Body.Len() != 0 || w.Header().Get("Content-Encoding") != "gzip" || w.Header().Get("Content-Length") != strconv.Itoa(zippedLen) {
		t.Fatalf("HEAD: %v", w.Header())
	}
}

// serve's admin listener answers /metrics and the live page's API from the
// cache: within the ttl (an hour here) a request in between changes
// neither answer.
func TestServeAdminAnswersCached(t *testing.T) {
	defer func(ttl time.Duration) { adminAnswerTTL = ttl }(adminAnswerTTL)
	adminAnswerTTL = time.Hour
	s, _ := startServe(t, &config.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0"})
	read := func(path string) string {
		t.Helper()
		resp, err := http.Get("http://" + s.Admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", path, resp.StatusCode, err)
		}
		return string(b)
	}
	metrics, slo := read("/metrics"), read("/admin/api/slo")
	chatThroughServe(t, s)
	if read("/metrics") != metrics || read("/admin/api/slo") != slo {
		t.Fatal("an admin answer was computed again within its ttl")
	}
}
