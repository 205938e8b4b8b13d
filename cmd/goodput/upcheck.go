package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/goodput/goodput/proxy"
	"github.com/prometheus/client_golang/prometheus"
)

// upstreamCheckEvery is how often the gateway checks that its upstream
// answers.
const upstreamCheckEvery = 2 * time.Second

// upstreamCheck tells whether the upstream accepts TCP connections: at
// start, and then every upstreamCheckEvery, for /readyz and
// goodput_upstream_up.
//
// A TCP connect, not an HTTP request: it costs the engine nothing (no
// request in its logs or metrics, no slot in its scheduler), and needs no
// health path, which engines name differently (vLLM and SGLang /health,
// others none). An OpenAI-compatible server listens once it is ready to
// serve, so a connect that succeeds is a good sign of an engine that
// answers; one that fails certainly means requests get 502. serve sets
// dial to the proxy's own connect (Proxy.CheckUpstream: the name's
// addresses in turn, with the same connect timeout), so that one address
// of several that does not answer is not the upstream down.
type upstreamCheck struct {
	url    string
	dial   func(ctx context.Context) error
	logger *log.Logger

	mu    sync.Mutex
	state int // 0 not checked yet, 1 answers, -1 does not
	err   error
	// short is why the last check could not be made: the gateway's own
	// shortage of descriptors (nil: it was made). The upstream's state is
	// then the one before.
	short error
}

func newUpstreamCheck(upstream string, connectTimeout time.Duration, logger *log.Logger) (*upstreamCheck, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	if connectTimeout <= 0 {
		connectTimeout = 5 * time.Second
	}
	d := net.Dialer{Timeout: connectTimeout}
	return &upstreamCheck{url: upstream, logger: logger, dial: func(ctx context.Context) error {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err
	}}, nil
}

// run checks at once, then every interval until ctx ends.
func (u *upstreamCheck) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		u.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// check dials the upstream once and logs a change.
func (u *upstreamCheck) check(ctx context.Context) {
	err := u.dial(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil && proxy.OutOfDescriptors(err) {
		// The gateway's own shortage: no packet left it, so nothing is
		// known of the upstream (goodput_upstream_up said 0, and
		// GoodputUpstreamDown blamed a healthy engine). /readyz says 503
		// all the same: requests that need a new upstream connection are
		// refused until some descriptors close.
		u.mu.Lock()
		was := u.short
		u.short = err
		u.mu.Unlock()
		if was == nil {
			u.logger.Printf("WARNING: the gateway is out of file descriptors, and cannot check upstream %s: %v; /readyz says 503 until it has some again", u.url, err)
		}
		return
	}
	u.mu.Lock()
	prev, was := u.state, u.short
	u.err, u.short = err, nil
	if err == nil {
		u.state = 1
	} else {
		u.state = -1
	}
	u.mu.Unlock()
	if was != nil {
		u.logger.Printf("the gateway has file descriptors again")
	}
	switch {
	case err != nil && prev == 0:
		u.logger.Printf("WARNING: upstream %s does not answer: %v; its requests get 502 and /readyz says 503 until it does (checked every %v)", u.url, err, upstreamCheckEvery)
	case err != nil && prev == 1:
		u.logger.Printf("WARNING: upstream %s stopped answering: %v; /readyz says 503 until it answers again", u.url, err)
	case err == nil && prev == -1:
		u.logger.Printf("upstream %s answers again", u.url)
	}
}

// ready reports whether the last check reached the upstream, and if not why.
func (u *upstreamCheck) ready() (bool, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.short != nil {
		return false, fmt.Sprintf("the gateway is out of file descriptors (raise its nofile limit): %v", u.short)
	}
	switch u.state {
	case 1:
		return true, ""
	case 0:
		return false, "upstream not checked yet"
	}
	return false, fmt.Sprintf("upstream %s does not answer: %v", u.url, u.err)
}

// collector exports goodput_upstream_up.
func (u *upstreamCheck) collector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "goodput_upstream_up",
		Help: "1 when the last check (a TCP connect, every 2s) reached the upstream, else 0; a check the gateway had no file descriptor for leaves it as it was.",
	}, func() float64 {
		u.mu.Lock()
		defer u.mu.Unlock()
		if u.state == 1 {
			return 1
		}
		return 0
	})
}
