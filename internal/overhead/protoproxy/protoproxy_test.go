//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func chunk(s string) string { return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n" }

const respHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

func testEvents(id, n int) []string {
	var ev []string
	for i := range n {
		ev = append(ev, fmt.Sprintf(`data: {"id":"c%d","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" t%d"},"finish_reason":null}]}`+"\n\n", id, i))
	}
	ev = append(ev, `data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":`+strconv.Itoa(n)+`}}`+"\n\n")
	return append(ev, "data: [DONE]\n\n")
}

func TestStreamFeedAnySplit(t *testing.T) {
	ev := testEvents(1, 3)
	// upstream: one event split over two chunks, two events in one chunk
	in := respHead + chunk(ev[0][:20]) + chunk(ev[0][20:]) + chunk(ev[1]+ev[2]) + chunk(ev[3]) + chunk(ev[4]) + "0\r\n\r\n"
	want := respHead
	for _, e := range ev {
		want += chunk(e)
	}
	want += "0\r\n\r\n"
	check := func(name string, parts []string) {
		t.Helper()
		var s stream
		s.begin(time.Now())
		var out []byte
		var done bool
		for k, p := range parts {
			var err error
			if done {
				t.Fatalf("%s: done before part %d", name, k)
			}
			out, done, err = s.feed([]byte(p), time.Now(), out)
			if err != nil {
				t.Fatalf("%s: part %d: %v", name, k, err)
			}
		}
		if !done || string(out) != want {
			t.Fatalf("%s: done %v, out\n%q\nwant\n%q", name, done, out, want)
		}
		if got := s.meter.TokenEvents(); got != 3 {
			t.Errorf("%s: %d token events metered, want 3", name, got)
		}
		if !s.meter.Done() {
			t.Errorf("%s: [DONE] not metered", name)
		}
	}
	check("whole", []string{in})
	for i := 1; i < len(in); i++ {
		check(fmt.Sprintf("split at %d", i), []string{in[:i], in[i:]})
	}
	bytewise := make([]string, len(in))
	for i := range in {
		bytewise[i] = in[i : i+1]
	}
	check("byte by byte", bytewise)
}

func TestStreamFeedRejects(t *testing.T) {
	for _, in := range []string{
		"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcd",
		respHead + "zz\r\n",
		respHead + "0\r\n\r\nextra",
	} {
		var s stream
		s.begin(time.Now())
		if _, _, err := s.feed([]byte(in), time.Now(), nil); err == nil {
			t.Errorf("feed(%q) accepted", in)
		}
	}
}

func TestRequestLen(t *testing.T) {
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
	for _, c := range []struct {
		in   string
		want int
		bad  bool
	}{
		{req, len(req), false},
		{req + "POST", len(req), false},
		{req[:len(req)-1], 0, false},
		{req[:20], 0, false},
		{"GET / HTTP/1.1\r\n\r\n", 0, true},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 0, true},
		{"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 0, true},
	} {
		n, err := requestLen([]byte(c.in))
		if n != c.want || (err != nil) != c.bad {
			t.Errorf("requestLen(%q) = %d, %v; want %d, error %v", c.in, n, err, c.want, c.bad)
		}
	}
}

// engine answers each POST (X-Id: n) with testEvents(n, 5), one write per
// event; it counts the connections it accepted.
type testEngine struct {
	ln       net.Listener
	mu       sync.Mutex
	accepted int
	conns    []net.Conn
}

func newTestEngine(t *testing.T) *testEngine {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &testEngine{ln: ln}
	t.Cleanup(func() {
		ln.Close()
		e.mu.Lock()
		for _, c := range e.conns {
			c.Close()
		}
		e.mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.accepted++
			e.conns = append(e.conns, c)
			e.mu.Unlock()
			go e.serve(c)
		}
	}()
	return e
}

func (e *testEngine) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		id, clen := -1, 0
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\r\n")
			if line == "" {
				break
			}
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimSpace(v)
			switch strings.ToLower(k) {
			case "x-id":
				id, _ = strconv.Atoi(v)
			case "content-length":
				clen, _ = strconv.Atoi(v)
			}
		}
		if _, err := io.CopyN(io.Discard, br, int64(clen)); err != nil {
			return
		}
		if _, err := io.WriteString(c, respHead); err != nil {
			return
		}
		for _, ev := range testEvents(id, 5) {
			if _, err := io.WriteString(c, chunk(ev)); err != nil {
				return
			}
		}
		if _, err := io.WriteString(c, "0\r\n\r\n"); err != nil {
			return
		}
	}
}

// readChunked reads one response and returns its decoded body.
func readChunked(br *bufio.Reader) (string, error) {
	for { // head
		line, err := br.ReadString('\n')
		if err != nil {
			return "", err
		}
		if line == "\r\n" {
			break
		}
	}
	var body bytes.Buffer
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return "", err
		}
		n, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		if err != nil {
			return "", fmt.Errorf("chunk size %q", line)
		}
		if _, err := io.CopyN(&body, br, n+2); err != nil {
			return "", err
		}
		body.Truncate(body.Len() - 2)
		if n == 0 {
			return body.String(), nil
		}
	}
}

// exercise sends requests on several keep-alive connections through the
// proxy at addr and checks every response.
func exercise(t *testing.T, addr string) {
	const conns, requests = 4, 5
	var wg sync.WaitGroup
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer nc.Close()
			_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(nc)
			for r := range requests {
				id := c*100 + r
				body := `{"stream":true}`
				req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Id: %d\r\nContent-Length: %d\r\n\r\n%s", id, len(body), body)
				if _, err := io.WriteString(nc, req); err != nil {
					t.Error(err)
					return
				}
				got, err := readChunked(br)
				if err != nil {
					t.Errorf("request %d: %v", id, err)
					return
				}
				if want := strings.Join(testEvents(id, 5), ""); got != want {
					t.Errorf("request %d: body\n%q\nwant\n%q", id, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestGoroutineModel(t *testing.T) {
	e := newTestEngine(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g := &gServer{upstream: e.ln.Addr().String()}
	go func() { _ = g.serve(ln) }()
	exercise(t, ln.Addr().String())
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.accepted > 4 {
		t.Errorf("the engine accepted %d connections for 4 clients in closed loops", e.accepted)
	}
}

func TestEpollModel(t *testing.T) {
	e := newTestEngine(t)
	for _, wait := range []string{waitRaw, waitSyscall, waitNetpoll} {
		srv, err := startEpoll("127.0.0.1:0", e.ln.Addr().String(), wait)
		if err != nil {
			t.Fatal(err)
		}
		exercise(t, srv.addr)
		srv.stop()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.accepted > 12 {
		t.Errorf("the engine accepted %d connections for 4 clients in closed loops, three times", e.accepted)
	}
}
