package testenv

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// RedisRelay forwards connections to a Redis (or any TCP server) until
// Freeze: from then on what the clients send is dropped, so the server
// never sees it and never answers it (the replies to what was forwarded
// before still come back), until Thaw. DropReplies drops the server's
// replies instead (a call the server ran, its reply lost). It closes at the
// test's end.
type RedisRelay struct {
	ln      net.Listener
	frozen  atomic.Bool
	noReply atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
	wg      sync.WaitGroup
	once    sync.Once
}

// StartRedisRelay listens on a loopback port and relays each connection
// to target (host:port).
func StartRedisRelay(t testing.TB, target string) *RedisRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &RedisRelay{ln: ln}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, up)
			r.mu.Unlock()
			r.wg.Add(2)
			go func() { defer r.wg.Done(); r.forward(c, up, &r.noReply) }()
			go func() { defer r.wg.Done(); r.forward(up, c, &r.frozen) }()
		}
	}()
	t.Cleanup(r.Close)
	return r
}

// Addr is the relay's host:port.
func (r *RedisRelay) Addr() string { return r.ln.Addr().String() }

// Freeze drops what the clients send from now on.
func (r *RedisRelay) Freeze() { r.frozen.Store(true) }

// Thaw forwards what the clients send again.
func (r *RedisRelay) Thaw() { r.frozen.Store(false) }

// DropReplies drops what the server sends, until drop is false.
func (r *RedisRelay) DropReplies(drop bool) { r.noReply.Store(drop) }

// Close closes the relay and every connection it holds; a second call
// does nothing.
func (r *RedisRelay) Close() {
	r.once.Do(func() {
		r.ln.Close()
		r.mu.Lock()
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
}

// forward copies what src sends to dst, dropping it while drop is set.
func (r *RedisRelay) forward(dst, src net.Conn, drop *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !drop.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
