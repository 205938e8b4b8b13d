package main

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/config"
)

// offsetClock makes scrapeClock time.Now moved on by what the test adds.
func offsetClock(t *testing.T) *atomic.Int64 {
	var off atomic.Int64
	scrapeClock = func() time.Time { return time.Now().Add(time.Duration(off.Load())) }
	t.Cleanup(func() { scrapeClock = time.Now })
	return &off
}

// A stream cut by the shutdown is counted after the last scrape before it:
// serve, scraped every 10 s, waits for one more scrape once the cut
// stream's record is written, and that scrape counts it; then it returns
// at once. Before, serve returned as soon as the records were written, and
// Prometheus never saw the cut request (a new user's probe: 692 judged
// and 5 misses in Prometheus against 699 and 12 in the request log, after
// a shutdown cut 7 requests).
func TestServeWaitsForTheLastScrape(t *testing.T) {
	off := offsetClock(t)
	r, metrics, body := serveScrapedWithLongStream(t)
	if n := scrapeSum(t, metrics, "goodput_requests_total"); n != 0 {
		t.Fatalf("goodput_requests_total %v before the shutdown", n)
	}
	off.Add(int64(10 * time.Second))
	scrapeSum(t, metrics, "goodput_requests_total") // scraped every 10 s
	r.cancel()
	_, _ = io.Copy(io.Discard, body)
	waitLog(t, r, "for the last scrape")
	select {
	case err := <-r.done:
		t.Fatalf("serve returned before the last scrape: %v", err)
	default:
	}
	if n := scrapeSum(t, metrics, "goodput_requests_total"); n != 1 {
		t.Fatalf("goodput_requests_total %v at the last scrape, want the cut stream's 1", n)
	}
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve still running 10 s after the last scrape")
	}
	if !strings.Contains(r.logs.String(), "scraped with every request counted") {
		t.Fatalf("log: %s", r.logs.String())
	}
}

// Without a scrape at shutdown serve waits one and a half intervals, no
// longer than shutdown_grace and 5 s after the signal, and says so; a
// second signal ends the wait; and a gateway scraped once or never does not
// wait at all.
func TestServeLastScrapeBounds(t *testing.T) {
	t.Run("one and a half intervals", func(t *testing.T) {
		off := offsetClock(t)
		r, metrics, body := serveScrapedWithLongStream(t)
		scrapeSum(t, metrics, "goodput_requests_total")
		off.Add(int64(200 * time.Millisecond))
		scrapeSum(t, metrics, "goodput_requests_total")
		r.cancel()
		_, _ = io.Copy(io.Discard, body)
		if err := <-r.done; err != nil {
			t.Fatal(err)
		}
		l := r.logs.String()
		if d := lastScrapeWait(t, l); d < 300*time.Millisecond || d > time.Second || !strings.Contains(l, "no scrape of /metrics in time") {
			t.Fatalf("waited up to %v, want 1.5 times the 200ms between the scrapes: %s", d, l)
		}
	})
	t.Run("within the grace", func(t *testing.T) {
		off := offsetClock(t)
		r, metrics, body := serveScrapedWithLongStream(t)
		scrapeSum(t, metrics, "goodput_requests_total")
		off.Add(int64(time.Hour))
		scrapeSum(t, metrics, "goodput_requests_total")
		r.cancel()
		_, _ = io.Copy(io.Discard, body)
		waitLog(t, r, "for the last scrape")
		close(r.cutNow) // a second signal
		if err := <-r.done; err != nil {
			t.Fatal(err)
		}
		l := r.logs.String()
		if d := lastScrapeWait(t, l); d > 300*time.Millisecond+finalScrapeSlack || d < finalScrapeSlack-time.Second {
			t.Fatalf("waited up to %v, want within the 300ms grace and 5s after the signal: %s", d, l)
		}
		if !strings.Contains(l, "no scrape of /metrics in time") {
			t.Fatalf("log: %s", l)
		}
	})
	for _, scrapes := range []int{0, 1} {
		t.Run("scraped "+string(rune('0'+scrapes)), func(t *testing.T) {
			r, metrics, body := serveScrapedWithLongStream(t)
			for range scrapes {
				scrapeSum(t, metrics, "goodput_requests_total")
			}
			r.cancel()
			_, _ = io.Copy(io.Discard, body)
			if err := <-r.done; err != nil {
				t.Fatal(err)
			}
			if l := r.logs.String(); strings.Contains(l, "last scrape") {
				t.Fatalf("log: %s", l)
			}
		})
	}
}

// lastScrapeWait reads from serve's log how long it said it would wait for
// the last scrape.
func lastScrapeWait(t *testing.T, log string) time.Duration {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if rest, ok := strings.CutPrefix(line, "shutdown: waiting up to "); ok && strings.Contains(rest, "for the last scrape") {
			d, err := time.ParseDuration(strings.Fields(rest)[0])
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
	}
	t.Fatalf("no wait for the last scrape in the log: %s", log)
	return 0
}

// serveScrapedWithLongStream runs serve with its admin listener and a 300ms
// shutdown_grace, with a stream in flight that the shutdown will cut; it
// returns the /metrics URL and the stream's body.
func serveScrapedWithLongStream(t *testing.T) (r *serveRun, metrics string, body io.Reader) {
	t.Helper()
	cfg := &config.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", RequestLog: filepath.Join(t.TempDir(), "requests.jsonl"),
		ShutdownGrace: cfgtypes.Duration(300 * time.Millisecond)}
	r, body = launchWithLongStream(t, cfg)
	return r, "http://" + r.Admin + "/metrics", body
}

// When the last scrape does not come, the log says the counts since the one
// before are in the request log only; when the request log lost records
// (a full disk at shutdown: 996 records not written, in a probe), it says
// that those are in neither, not that the request log has them.
func TestLastScrapeMissedSaysWhatTheRequestLogLost(t *testing.T) {
	for _, lost := range []int64{0, 996} {
		w := newScrapeWatch(newAnswerCache(nil, time.Second, false))
		now := time.Now()
		w.starts[0], w.starts[1], w.n = now, now.Add(-time.Hour), 2 // scraped hourly: the wait has time left
		var logs strings.Builder
		cut := make(chan struct{})
		close(cut) // a second signal: no wait
		cfg := &config.Config{RequestLog: "requests.jsonl"}
		lastScrape(cfg, w, now, cut, lost, log.New(&logs, "", 0))
		l := logs.String()
		if !strings.Contains(l, "no scrape of /metrics in time: what was counted since the last one is in the request log only") {
			t.Fatalf("lost %d: log %q", lost, l)
		}
		if said := strings.Contains(l, "could not write (996 in all, goodput_request_log_errors_total)") && strings.Contains(l, "are in neither"); said != (lost > 0) {
			t.Errorf("lost %d: log %q", lost, l)
		}
	}
}

// Without a request log (request_log not set, the default), a shutdown
// whose last scrape does not come says the counts since the one before
// were not scraped, not that they are in a request log that does not
// exist, whether it waited or had no time left to.
func TestLastScrapeMissedWithoutARequestLog(t *testing.T) {
	for _, grace := range []time.Duration{0, time.Nanosecond} {
		w := newScrapeWatch(newAnswerCache(nil, time.Second, false))
		now := time.Now()
		w.starts[0], w.starts[1], w.n = now, now.Add(-time.Hour), 2 // scraped hourly
		var logs strings.Builder
		cut := make(chan struct{})
		close(cut) // a second signal: no wait
		cfg := &config.Config{}
		stopAt := now
		if grace > 0 {
			// The signal long past: no time left to wait.
			cfg.ShutdownGrace = cfgtypes.Duration(grace)
			stopAt = now.Add(-time.Hour)
		}
		lastScrape(cfg, w, stopAt, cut, 0, log.New(&logs, "", 0))
		l := logs.String()
		if strings.Contains(l, "request log only") || !strings.Contains(l, "was not scraped, and there is no request log to find it in (request_log is not set)") {
			t.Errorf("grace %v: log %q", grace, l)
		}
	}
}

// A shutdown after which no request was counted since /metrics was last
// answered waits for no last scrape: a gateway scraped by hand now and
// then waited up to 30 s for a scrape with nothing new to take (a new
// user's run). Once a record was counted since, or when another format's
// answer (another scraper's) was computed before it, the wait stays.
func TestLastScrapeNotAwaitedWhenNothingWasCountedSince(t *testing.T) {
	var counted atomic.Uint64
	counted.Store(5)
	w := newCountedScrapeWatch(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(rw, "x 1\n") }), time.Nanosecond, counted.Load)
	scrape := func(accept string) {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		r.Header.Set("Accept", accept)
		rec := httptest.NewRecorder()
		w.ServeHTTP(rec, r)
		if rec.Code != 200 {
			t.Fatalf("scrape: %d", rec.Code)
		}
	}
	shutdown := func() string {
		t.Helper()
		now := time.Now()
		w.starts[0], w.starts[1], w.n = now, now.Add(-time.Hour), 2 // scraped hourly: the wait has time left
		var logs strings.Builder
		cut := make(chan struct{})
		close(cut) // a second signal: a wait ends at once
		lastScrape(&config.Config{RequestLog: "requests.jsonl"}, w, now, cut, 0, log.New(&logs, "", 0))
		return logs.String()
	}
	scrape("text/plain")
	if l := shutdown(); !strings.Contains(l, "no request was counted since /metrics was last answered") || strings.Contains(l, "waiting") {
		t.Fatalf("nothing counted since the scrape: log %q", l)
	}
	counted.Add(1)
	if l := shutdown(); !strings.Contains(l, "waiting up to") {
		t.Fatalf("a record counted since the scrape: log %q", l)
	}
	scrape("text/plain")                                        // the hand's scrape has it
	counted.Add(1)                                              // then one more,
	scrape("application/openmetrics-text")                      // which the other scraper's has,
	if l := shutdown(); !strings.Contains(l, "waiting up to") { // but not the first's
		t.Fatalf("a format's answer behind the counts: log %q", l)
	}
}
