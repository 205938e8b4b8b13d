package main

import (
	"bytes"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// answerCache serves the admin listener's costly answers (/metrics, the
// live page's SLO and profile APIs) from one computation per key and
// period: with many tenants and models a scrape gathers a few hundred
// thousand series (half a second of CPU and 20 MB), and every admin client
// computing its own, at once, took the gateway's clients' CPU (their
// first-token time tripled under 16 concurrent scrapes) and memory (past
// 1 GiB under 32 clients that never read their answers). One computation
// runs at a time; an answer is shared, never copied, by every client that
// asks within ttl, so the memory a slow reader holds is the one answer,
// and the CPU is at most one computation per key and ttl.
//
// Only GET and HEAD are served. The key is what the answer depends on:
// path, query and the
// request's Accept and Accept-Encoding (the exposition format and its
// compression). At most answerCacheKeys keys are kept.
type answerCache struct {
	next  http.Handler
	ttl   time.Duration
	query bool // the answer depends on the query (false: /metrics)
	now   func() time.Time
	max   int // answerCacheBytes; a field for tests

	mu      sync.Mutex // one computation at a time
	answers map[string]*cachedAnswer
	bytes   int // the answers' bodies
}

type cachedAnswer struct {
	at     time.Time
	status int
	header http.Header
	body   []byte
}

// answerCacheKeys and answerCacheBytes bound what the cache holds: its
// answers live a ttl, and past either bound the others are dropped when
// one more is kept, so queries made up per call cannot make it hold more
// than the one answer each client is being sent.
const (
	answerCacheKeys  = 64
	answerCacheBytes = 64 << 20
)

// newAnswerCache caches next's answers for ttl; query tells whether they
// depend on the request's query (when not, a made-up query shares the
// answer).
func newAnswerCache(next http.Handler, ttl time.Duration, query bool) *answerCache {
	return &answerCache{next: next, ttl: ttl, query: query, now: time.Now, max: answerCacheBytes, answers: make(map[string]*cachedAnswer)}
}

func (c *answerCache) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		// Nothing here changes state (promhttp answered a DELETE with the
		// metrics).
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	// A HEAD gets the head of the GET's answer.
	key := r.URL.Path
	if c.query {
		key += "?" + r.URL.RawQuery
	}
	key += "\x00" + r.Header.Get("Accept") + "\x00" + r.Header.Get("Accept-Encoding")
	a := c.answer(key, r)
	h := w.Header()
	for k, v := range a.header {
		h[k] = v
	}
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(a.status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(a.body)
	}
}

// forget drops every answer kept: the next client's is computed.
func (c *answerCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.answers)
	c.bytes = 0
}

// answer returns key's answer, computing it when there is none younger
// than ttl.
func (c *answerCache) answer(key string, r *http.Request) *cachedAnswer {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if a := c.answers[key]; a != nil && now.Sub(a.at) < c.ttl {
		return a
	}
	if r.Method != http.MethodGet {
		// Computed as the GET it stands for (a handler may write no body
		// for a HEAD).
		r = r.Clone(r.Context())
		r.Method = http.MethodGet
	}
	rec := &answerRecorder{header: make(http.Header)}
	c.next.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	a := &cachedAnswer{at: now, status: rec.status, header: rec.header, body: rec.body.Bytes()}
	for k, old := range c.answers {
		if k == key || now.Sub(old.at) >= c.ttl {
			delete(c.answers, k)
			c.bytes -= len(old.body)
		}
	}
	if len(c.answers) >= answerCacheKeys || c.bytes+len(a.body) > c.max {
		clear(c.answers) // keys that keep changing (a query made up per call)
		c.bytes = 0
	}
	c.answers[key] = a
	c.bytes += len(a.body)
	return a
}

// answerRecorder takes a handler's answer whole.
type answerRecorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *answerRecorder) Header() http.Header { return r.header }

func (r *answerRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *answerRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
