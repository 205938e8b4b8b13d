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
	next http.Handler
	ttl  time.Duration
	now  func() time.Time

	mu      sync.Mutex // one computation at a time
	answers map[string]*cachedAnswer
}

type cachedAnswer struct {
	at     time.Time
	status int
	header http.Header
	body   []byte
}

const answerCacheKeys = 64

func newAnswerCache(next http.Handler, ttl time.Duration) *answerCache {
	return &answerCache{next: next, ttl: ttl, now: time.Now, answers: make(map[string]*cachedAnswer)}
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
	key := r.URL.Path + "?" + r.URL.RawQuery + "\x00" + r.Header.Get("Accept") + "\x00" + r.Header.Get("Accept-Encoding")
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
	if len(c.answers) >= answerCacheKeys {
		for k, old := range c.answers {
			if now.Sub(old.at) >= c.ttl {
				delete(c.answers, k)
			}
		}
		if len(c.answers) >= answerCacheKeys {
			clear(c.answers) // keys that keep changing (a query made up per call)
		}
	}
	c.answers[key] = a
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
