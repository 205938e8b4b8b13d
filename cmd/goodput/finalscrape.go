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
// the interval between its last two scrapes, and never past
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

	mu         sync.Mutex
	last, prev time.Time     // the last two scrapes' starts
	armed      time.Time     // arm's time: a scrape begun after it is the last one
	served     chan struct{} // closed once such a scrape is answered
}

func newScrapeWatch(cache *answerCache) *scrapeWatch {
	return &scrapeWatch{next: cache, cache: cache, served: make(chan struct{})}
}

func (w *scrapeWatch) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	start := scrapeClock()
	last := false
	if r.Method == http.MethodGet {
		w.mu.Lock()
		w.prev, w.last = w.last, start
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
// the interval between the last two scrapes, and false when there were not
// two (nothing scrapes the gateway, or it started just now): then there is
// nothing to wait for.
func (w *scrapeWatch) arm(now time.Time) (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = now
	w.cache.forget()
	if w.prev.IsZero() {
		return 0, false
	}
	return w.last.Sub(w.prev), true
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
