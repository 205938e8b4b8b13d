package main

import (
	"io"
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
