package main

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Two Prometheus servers (an HA pair) scrape a replica each interval, at
// offsets of their own: the gaps between scrapes alternate between a short
// one and the rest of the interval. A shutdown signalled after the short
// gap must still wait for the next scrape, which comes nearly an interval
// later, not one and a half of the short gap.
func TestServeLastScrapeHAPair(t *testing.T) {
	off := offsetClock(t)
	r, metrics, body := serveScrapedWithLongStream(t)
	scrapeSum(t, metrics, "goodput_requests_total") // A
	off.Add(int64(200 * time.Millisecond))
	scrapeSum(t, metrics, "goodput_requests_total") // B
	off.Add(int64(10 * time.Second))
	scrapeSum(t, metrics, "goodput_requests_total") // A, 10 s on
	off.Add(int64(200 * time.Millisecond))
	scrapeSum(t, metrics, "goodput_requests_total") // B, 200ms after it
	r.cancel()
	_, _ = io.Copy(io.Discard, body)
	waitLog(t, r, "shutting down")
	time.Sleep(time.Second) // the next scrape, well within the interval and the grace
	select {
	case err := <-r.done:
		t.Fatalf("serve returned (%v) before the next scrape of the pair: %s", err, r.logs.String())
	default:
	}
	if n := scrapeSum(t, metrics, "goodput_requests_total"); n != 1 {
		t.Fatalf("goodput_requests_total %v at the last scrape, want the cut stream's 1", n)
	}
	if err := <-r.done; err != nil {
		t.Fatal(err)
	}
}

// Two scrapes at once: the one that read the clock first may note its
// start second. The interval between the last two scrapes must not come
// out negative, which ended the wait before it began ("no time left").
func TestServeLastScrapeConcurrent(t *testing.T) {
	var calls atomic.Int32
	scrapeClock = func() time.Time {
		now := time.Now()
		if calls.Add(1) == 3 { // the third scrape: slow between its clock and its note
			time.Sleep(300 * time.Millisecond)
		}
		return now
	}
	t.Cleanup(func() { scrapeClock = time.Now })
	r, metrics, body := serveScrapedWithLongStream(t)
	scrapeSum(t, metrics, "goodput_requests_total")
	scrapeSum(t, metrics, "goodput_requests_total")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _, _ = http.Get(metrics) }()
	time.Sleep(100 * time.Millisecond)
	scrapeSum(t, metrics, "goodput_requests_total")
	wg.Wait()
	r.cancel()
	_, _ = io.Copy(io.Discard, body)
	if err := <-r.done; err != nil {
		t.Fatal(err)
	}
	l := r.logs.String()
	if strings.Contains(l, "no time left") {
		t.Fatalf("no wait for the last scrape: %s", l)
	}
	if d := lastScrapeWait(t, l); d <= 0 {
		t.Fatalf("waited up to %v: %s", d, l)
	}
}
