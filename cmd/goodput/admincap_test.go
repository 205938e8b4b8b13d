package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/config"
)

// The admin listener holds at most adminMaxConns connections: kept-alive
// admin clients cannot use up the descriptors the gateway's clients need,
// nor keep a health check out: one past the cap is served once the
// connection idle the longest has rested 10 ms, which is closed.
func TestServeAdminConnectionsCapped(t *testing.T) {
	s, _ := startServe(t, &config.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0"})
	healthz := func(c net.Conn, br *bufio.Reader) error {
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		_, err = io.ReadAll(resp.Body)
		return err
	}
	held := fillAdmin(t, s.Admin, func(c net.Conn) {
		if err := healthz(c, bufio.NewReader(c)); err != nil {
			t.Fatal(err)
		}
	})
	extra, err := net.Dial("tcp", s.Admin) // the kernel's backlog takes it
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	answered := make(chan error, 1)
	go func() { answered <- healthz(extra, bufio.NewReader(extra)) }()

	chatThroughServe(t, s) // the gateway still serves its clients
	extra.SetDeadline(time.Now().Add(10 * time.Second))
	if err := <-answered; err != nil {
		t.Fatalf("past the cap: %v", err)
	}
	// One idle connection was closed to make room (the one idle the
	// longest: which one that is depends on when the server noted each
	// idle, after the client had its answer), and only one.
	closed := make(chan error, len(held))
	for _, c := range held {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		go func() {
			_, err := c.Read(make([]byte, 1))
			closed <- err
		}()
	}
	if err := <-closed; err != io.EOF {
		t.Fatalf("no idle admin connection was closed to make room: %v", err)
	}
	for _, c := range held {
		c.SetReadDeadline(time.Now()) // the others end their reads now
	}
	for range len(held) - 1 {
		if err := <-closed; err == io.EOF {
			t.Fatal("a second idle admin connection was closed")
		}
	}
}

// Connections that send nothing, or trickle a request head, do not keep a
// health check out either: at the cap, one of them that has been at it a
// second is closed to make room (before, each held its slot for the
// server's 10 s header timeout and was opened again: 40 such connections
// failed 7 of 10 health checks with a 3 s timeout).
func TestServeAdminSilentConnectionsDoNotKeepHealthOut(t *testing.T) {
	for _, trickle := range []bool{false, true} {
		t.Run(fmt.Sprintf("trickle=%v", trickle), func(t *testing.T) {
			s, _ := startServe(t, &config.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0"})
			held := fillAdmin(t, s.Admin, func(c net.Conn) {
				if trickle {
					io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n") // and no more
				}
			})
			extra, err := net.Dial("tcp", s.Admin) // the kernel's backlog takes it
			if err != nil {
				t.Fatal(err)
			}
			defer extra.Close()
			io.WriteString(extra, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			extra.SetDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("past the cap: %v %v", resp, err)
			}
			// It was answered before the header timeout closed the held
			// ones: all but the one closed to make room are still open.
			open := 0
			for _, c := range held {
				c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				if _, err := c.Read(make([]byte, 1)); err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						open++
					}
				}
			}
			if open < adminMaxConns-2 {
				t.Fatalf("%d of %d held connections still open: the health check waited for the header timeout", open, adminMaxConns)
			}
		})
	}
}

// Connections opened one after another, 100 a second, each sending half
// a request head and no more, do not keep health checks out: each makes
// room 10 ms after its accept. With a second's rest the 32 slots turned
// over 32 times a second, and every health check behind such connections
// in the kernel's backlog timed out (a new user's probe, at 200 a second;
// this test too, at 100); each here has the 3 s a kubelet's probe gives
// it. (Not faster: under the race detector on a loaded CI machine a turn
// of a slot may take a few milliseconds.)
func TestServeAdminHalfHeadsOpenedAllTheTimeDoNotKeepHealthOut(t *testing.T) {
	s, _ := startServe(t, &config.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0"})
	stop := make(chan struct{})
	past := make(chan struct{}) // closed once twice the cap have been opened
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			if n == 2*adminMaxConns {
				close(past)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			c, err := net.Dial("tcp", s.Admin)
			if err != nil {
				continue
			}
			io.WriteString(c, "GET /metrics HTTP/1.1\r\n")
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				go func() {
					<-stop
					c.Close()
				}()
				io.Copy(io.Discard, c) // until the gateway, or the test's end, closes it
			}()
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	<-past // the cap is full, and more wait in the backlog
	for i := range 5 {
		resp, err := client.Get("http://" + s.Admin + "/healthz")
		if err != nil {
			t.Fatalf("health check %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("health check %d: %d", i, resp.StatusCode)
		}
	}
}

// fillAdmin opens adminMaxConns connections to the admin listener at addr,
// each given to use once open; they close when the test ends.
func fillAdmin(t *testing.T, addr string, use func(net.Conn)) []net.Conn {
	t.Helper()
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for range adminMaxConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		use(c)
	}
	return held
}

// chatThroughServe sends one chat request through serve's gateway and
// checks it is answered 200.
func chatThroughServe(t *testing.T, s serving) {
	t.Helper()
	resp, err := http.Post("http://"+s.Proxy+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"sim-llama","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("gateway answered %d", resp.StatusCode)
	}
}
