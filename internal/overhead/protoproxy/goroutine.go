//go:build linux

package main

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/goodput/goodput/meter"
)

// The goroutine model: Go's net package and its poller, one goroutine per
// client connection, which reads the request, takes an upstream connection
// from the pool and then streams the response in a loop inside ONE
// syscall.RawConn.Read call:
//
//	read(2) into a lent buffer; a full buffer: read again; a short read:
//	frame, parse, meter and write what it brought, then return false, so
//	that the poller parks the goroutine until the socket is readable,
//	without the read that would fail with EAGAIN first.
//
// No wake-up is lost by that, as Go 1.26's source shows:
// internal/poll/fd_unix.go, FD.RawRead, calls pd.prepareRead once (it is
// runtime.poll_runtime_pollReset, which sets the descriptor's read state
// rg to pdNil) and then loops { if f(fd) { return }; pd.waitRead }, with
// no reset between the callback's false and waitRead. waitRead is
// runtime.poll_runtime_pollWait → netpollblock (runtime/netpoll.go),
// which first consumes a pending notification (CAS rg pdReady → pdNil)
// and returns at once: data that arrived after the short read made the
// edge-triggered epoll report the socket, netpollready set rg to pdReady
// (no goroutine was parked yet), and the wait returns to call f again.
// Only a reset (a new RawRead, which calls f first anyway) forgets a
// notification, and a notification for bytes the short read already took
// costs one EAGAIN read, not a lost event.

type bufs struct {
	in  []byte
	out []byte
}

// bufPool lends the read buffer and the output buffer for one callback:
// a parked stream holds neither.
var bufPool = sync.Pool{New: func() any {
	return &bufs{in: make([]byte, readSize), out: make([]byte, 0, readSize+readSize/4)}
}}

type upConn struct {
	c  *net.TCPConn
	rc syscall.RawConn
}

// gServer is the goroutine model's proxy.
type gServer struct {
	upstream string
	mu       sync.Mutex
	idle     []*upConn
	recs     sync.Pool
}

func (g *gServer) serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go g.conn(c.(*net.TCPConn))
	}
}

func (g *gServer) getUp() (*upConn, error) {
	g.mu.Lock()
	if n := len(g.idle); n > 0 {
		u := g.idle[n-1]
		g.idle[n-1] = nil
		g.idle = g.idle[:n-1]
		g.mu.Unlock()
		return u, nil
	}
	g.mu.Unlock()
	c, err := net.DialTimeout("tcp", g.upstream, 5*time.Second)
	if err != nil {
		return nil, err
	}
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		c.Close()
		return nil, err
	}
	return &upConn{c: c.(*net.TCPConn), rc: rc}, nil
}

func (g *gServer) putUp(u *upConn) {
	g.mu.Lock()
	g.idle = append(g.idle, u)
	g.mu.Unlock()
}

var errEOF = errors.New("upstream closed the connection in a response")

// conn serves one client connection until it closes or fails.
func (g *gServer) conn(c *net.TCPConn) {
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	var cfd int
	if err := rc.Control(func(fd uintptr) { cfd = int(fd) }); err != nil {
		return
	}
	var (
		req     []byte // request bytes read and not yet forwarded
		pending []byte // response bytes the client's socket had no room for
		s       stream
	)
	for {
		// The next request: it may already be in req.
		n, rerr := requestLen(req)
		if n == 0 && rerr == nil {
			err := rc.Read(func(fd uintptr) bool {
				b := bufPool.Get().(*bufs)
				defer bufPool.Put(b)
				for {
					k, e := sysRead(int(fd), b.in)
					switch {
					case e == syscall.EAGAIN:
						return false
					case e != 0:
						rerr = e
						return true
					case k == 0:
						rerr = io.EOF
						return true
					}
					req = append(req, b.in[:k]...)
					if n, rerr = requestLen(req); n > 0 || rerr != nil {
						return true
					}
					if k < len(b.in) {
						return false
					}
				}
			})
			if err != nil || rerr != nil {
				return
			}
		}
		if rerr != nil {
			return
		}
		s.begin(time.Now())
		u, err := g.forward(req[:n])
		if err != nil {
			return
		}
		req = req[:copy(req, req[n:])]

		// The response, read → meter → write.
		var done bool
		var serr error
		for !done && serr == nil {
			err := u.rc.Read(func(fd uintptr) bool {
				b := bufPool.Get().(*bufs)
				defer bufPool.Put(b)
				for {
					k, e := sysRead(int(fd), b.in)
					switch {
					case e == syscall.EAGAIN:
						return false
					case e != 0:
						serr = e
						return true
					case k == 0:
						serr = errEOF
						return true
					}
					var out []byte
					out, done, serr = s.feed(b.in[:k], time.Now(), b.out[:0])
					b.out = out[:0]
					if len(out) > 0 {
						w, e := sysWrite(cfd, out)
						if e != 0 && e != syscall.EAGAIN {
							serr = e
							return true
						}
						if w < len(out) {
							// the client's socket is full: keep the rest, wait
							// until it can take it (reading stops meanwhile)
							pending = append(pending[:0], out[w:]...)
							return true
						}
					}
					if done || serr != nil {
						return true
					}
					if k < len(b.in) {
						return false // drained: wait for readiness, no EAGAIN read
					}
				}
			})
			if err != nil && serr == nil {
				serr = err
			}
			if len(pending) > 0 && serr == nil {
				serr = flush(rc, &pending)
			}
		}
		if serr != nil {
			u.c.Close()
			return
		}
		rec, _ := g.recs.Get().(*meter.Record)
		if rec == nil {
			rec = new(meter.Record)
		}
		s.finish(rec)
		g.recs.Put(rec)
		g.putUp(u)
		if cap(pending) > 4<<10 {
			pending = nil
		}
	}
}

// forward sends the request on an upstream connection from the pool (or a
// new one when the pooled one turns out closed).
func (g *gServer) forward(req []byte) (*upConn, error) {
	for range 2 {
		u, err := g.getUp()
		if err != nil {
			return nil, err
		}
		if _, err := u.c.Write(req); err != nil {
			u.c.Close()
			continue
		}
		return u, nil
	}
	return nil, errors.New("upstream write failed twice")
}

// flush writes *pending to the client, waiting for room in its socket.
func flush(rc syscall.RawConn, pending *[]byte) error {
	var werr error
	buf := *pending
	err := rc.Write(func(fd uintptr) bool {
		for len(*pending) > 0 {
			w, e := sysWrite(int(fd), *pending)
			if e == syscall.EAGAIN {
				return false
			}
			if e != 0 {
				werr = e
				return true
			}
			*pending = (*pending)[w:]
		}
		return true
	})
	*pending = buf[:0]
	if err != nil {
		return err
	}
	return werr
}
