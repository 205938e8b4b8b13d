package main

import (
	"net/http"
	"sync"
	"time"
)

// The last scrape at shutdown. Prometheus sees what a replica counted only
// at its scrapes: the requests a shutdown ends (the cut streams, the queued
// requests answered 503, each a miss of its tenant's objective) are counted
// after the last scrape, and a process that exits once their records are
// written takes those counts with it. Rolling restarts would lose them at
// every replica, and only the misses a restart causes, so a tenant's
// attainment in Prometheus would read better than its request log. So at
// shutdown, once every record is written, the gateway waits for one more
// scrape of /metrics, when something scrapes it: up to one and a half of
// the longest interval between its last scrapes, and never past
// shutdown_grace plus finalScrapeSlack after the signal (what a
// pod's grace period leaves beyond shutdown_grace: README, Shutdown).

// finalScrapeSlack is how long past shutdown_grace after the signal the
// wait for the last scrape may end.
const finalScrapeSlack = 5 * time.Second

// scrapeClock is the clock of the scrapes and of the wait's bounds; a
// variable for tests, which move it on to make an interval between two
// scrapes.
var scrapeClock = time.Now

// scrapeWatch notes the scrapes of /metrics and waits for one at shutdown.
type scrapeWatch struct {
	next  http.Handler
	cache *answerCache // the answers next serves from, forgotten at arm

	mu     sync.Mutex
	starts [scrapeGaps + 1]time.Time // the last scrapes' starts, the latest first
	n      int                       // how many of starts are set
	armed  time.Time                 // arm's time: a scrape begun after it is the last one
	served chan struct{}             // closed once such a scrape is answered

	counts *answerCounts // what the answers of /metrics counted (nil: not known)
}

// answerCounts notes, as each answer of /metrics is computed, how many
// records had been counted (counted: the proxy's Emitted), by the answer's
// format: at shutdown, when no record was counted since every format was
// last computed, the answers scraped last had every count, and there is
// no scrape to wait for (a gateway scraped now and then by hand waited
// out up to 30 s for a scrape that had nothing new to take).
type answerCounts struct {
	next    http.Handler
	counted func() uint64

	mu   sync.Mutex
	seen map[string]uint64 // by Accept and Accept-Encoding, as the cache keys its answers
}

// maxAnswerFormats bounds answerCounts.seen: past it, formats made up per
// request are not told apart, and the wait is never skipped.
const maxAnswerFormats = answerCacheKeys

func (c *answerCounts) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	n := c.counted() // before the gathering: what it counts at least
	c.next.ServeHTTP(rw, r)
	key := r.Header.Get("Accept") + "\x00" + r.Header.Get("Accept-Encoding")
	c.mu.Lock()
	if _, ok := c.seen[key]; ok || len(c.seen) < maxAnswerFormats {
		c.seen[key] = n
	} else {
		c.seen[""] = 0 // one made-up format too many: never all current
	}
	c.mu.Unlock()
}

// current reports whether no record was counted since each format's
// answer was last computed.
func (c *answerCounts) current() bool {
	n := c.counted()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.seen) == 0 {
		return false
	}
	for _, m := range c.seen {
		if m != n {
			return false
		}
	}
	return true
}

// scrapeGaps is how many of the gaps between the last scrapes the wait
// takes the longest of: two Prometheus servers (an HA pair) scrape at
// offsets of their own, and the gap between the last two scrapes may be
// the short one between the pair's, not the interval.
const scrapeGaps = 3

func newScrapeWatch(cache *answerCache) *scrapeWatch {
	return &scrapeWatch{next: cache, cache: cache, served: make(chan struct{})}
}

// newCountedScrapeWatch is newScrapeWatch for /metrics answered by h
// through a cache of ttl, noting what each answer counted (answerCounts).
func newCountedScrapeWatch(h http.Handler, ttl time.Duration, counted func() uint64) *scrapeWatch {
	c := &answerCounts{next: h, counted: counted, seen: map[string]uint64{}}
	w := newScrapeWatch(newAnswerCache(c, ttl, false))
	w.counts = c
	return w
}

func (w *scrapeWatch) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	last := false
	if r.Method == http.MethodGet {
		w.mu.Lock()
		// Read under the lock, so that starts are in order (two scrapes
		// at once made a negative interval).
		start := scrapeClock()
		copy(w.starts[1:], w.starts[:len(w.starts)-1])
		w.starts[0] = start
		w.n = min(w.n+1, len(w.starts))
		last = !w.armed.IsZero() && start.After(w.armed)
		w.mu.Unlock()
	}
	w.next.ServeHTTP(rw, r)
	if last {
		w.mu.Lock()
		select {
		case <-w.served:
		default:
			close(w.served)
		}
		w.mu.Unlock()
	}
}

// arm starts the wait for the last scrape at now: the answers cached
// before it, which miss what was counted since, are forgotten. It returns
// the longest of the intervals between the last scrapes (scrapeGaps), and
// false when there were not two (nothing scrapes the gateway, or it
// started just now): then there is nothing to wait for.
func (w *scrapeWatch) arm(now time.Time) (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = now
	w.cache.forget()
	if w.n < 2 {
		return 0, false
	}
	var every time.Duration
	for i := 1; i < w.n; i++ {
		every = max(every, w.starts[i-1].Sub(w.starts[i]))
	}
	return every, true
}

// wait waits for a scrape begun after arm to be answered, for d at most
// or until cut closes (a second signal); it reports whether one was.
func (w *scrapeWatch) wait(d time.Duration, cut <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.served:
		return true
	case <-t.C:
	case <-cut:
	}
	return false
}
