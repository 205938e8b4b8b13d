package ratelimit

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// respValid is RESP the scanner must pass whole, however it is split: every
// RESP2 and RESP3 type, nulls, nesting, attributes, the streamed forms, a
// bulk string at the limit, and elements up to the limit.
var respValid = strings.Join([]string{
	"+OK\r\n", "-ERR unknown command 'HELLO'\r\n", ":-42\r\n", "_\r\n", ",3.14\r\n", "#t\r\n",
	"(3492890328409238509324850943850943825024385\r\n",
	"$0\r\n\r\n", "$5\r\nhe\r\no\r\n", "$-1\r\n", "*-1\r\n", "*0\r\n", "!11\r\nSYNTAX err\n\r\n",
	"=15\r\ntxt:Some string\r\n",
	"*2\r\n:1\r\n*3\r\n$1\r\na\r\n%1\r\n+k\r\n~2\r\n:1\r\n:2\r\n_\r\n",
	"|1\r\n+ttl\r\n:3600\r\n*2\r\n:1\r\n|1\r\n+a\r\n+b\r\n:2\r\n",
	">3\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nkey\r\n+x\r\n",
	"$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;1\r\nd\r\n;0\r\n",
	"*?\r\n:1\r\n:2\r\n.\r\n", "%?\r\n+a\r\n:1\r\n.\r\n", "~?\r\n.\r\n",
	// Nested as deeply as may be, in each kind, twice in a row.
	strings.Repeat("*1\r\n", maxReplyDepth) + ":1\r\n", strings.Repeat("*2\r\n:0\r\n", maxReplyDepth) + ":1\r\n",
	strings.Repeat("%1\r\n+k\r\n~1\r\n", maxReplyDepth/2) + "_\r\n",
	strings.Repeat("*?\r\n", maxReplyDepth) + strings.Repeat(".\r\n", maxReplyDepth),
	"$" + strconv.Itoa(maxReplyBulk) + "\r\n" + strings.Repeat("x", maxReplyBulk) + "\r\n",
	"*" + strconv.Itoa(maxReplyElements) + "\r\n" + strings.Repeat(":7\r\n", maxReplyElements),
	"%" + strconv.Itoa(maxReplyElements/2-1) + "\r\n*1\r\n" + strings.Repeat(":7\r\n", maxReplyElements-1),
	"+" + strings.Repeat("y", maxReplyBulk-1) + "\r\n", // with its CR, at the limit
}, "")

// respRefused are replies the scanner must refuse, each after the valid
// replies before it: the byte at which it must have refused at the latest
// is the end of the first line that holds "!".
var respRefused = []struct{ name, stream string }{
	{"huge bulk", "+OK\r\n!$99999999999\r\nabc"},
	{"gigabyte bulk", "!$999999999\r\nabc"},
	{"bulk over the limit", "!$" + strconv.Itoa(maxReplyBulk+1) + "\r\n"},
	{"blob error", "!!99999999\r\n"},
	{"verbatim", "!=99999999\r\n"},
	{"chunk", "$?\r\n!;99999999\r\n"},
	{"array", "!*" + strconv.Itoa(maxReplyElements+1) + "\r\n"},
	{"push", "!>99999999\r\n"},
	{"set", "!~99999999\r\n"},
	{"map", "!%" + strconv.Itoa(maxReplyElements/2+1) + "\r\n"},
	{"attribute", "!|" + strconv.Itoa(maxReplyElements/2+1) + "\r\n"},
	{"nested", "*2\r\n*200000\r\n:1\r\n!*100000\r\n"},
	{"nested too deeply", strings.Repeat("*1\r\n", maxReplyDepth) + "!*1\r\n:1\r\n"},
	{"nested too deeply in maps and sets", strings.Repeat("%1\r\n+k\r\n~1\r\n", maxReplyDepth/2) + "!>1\r\n"},
	{"nested too deeply, streamed", strings.Repeat("*?\r\n", maxReplyDepth) + "!*?\r\n"},
	{"nested after a complete one", "*1\r\n*262144\r\n" + strings.Repeat(":1\r\n", 262144) + "*2\r\n*200000\r\n!*100000\r\n"},
	{"long line", "!+" + strings.Repeat("z", maxReplyBulk+1)},
	{"overflow", "!$99999999999999999999999999999\r\n"},
	{"negative", "!*-2\r\n"},
	{"not a number", "!$12a\r\n"},
	{"no CR", "!$12\n"},
	{"unknown type", "!x\r\n"},
	{"bare newline", "!\n"},
}

func scanSplit(s *respScanner, stream string, parts ...int) error {
	prev := 0
	for _, at := range append(parts, len(stream)) {
		if err := s.scan([]byte(stream[prev:at])); err != nil {
			return err
		}
		prev = at
	}
	return nil
}

// The scanner follows valid RESP whatever the reads' sizes: whole, one byte
// per read, and split in two at every point.
func TestRespScannerPassesValidReplies(t *testing.T) {
	check := func(name string, s *respScanner, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s.closeDone()
		if s.state != scanType || s.pending != 0 || s.depth != 0 {
			t.Fatalf("%s: state %d, %d elements pending after the last reply", name, s.state, s.pending)
		}
	}
	var s respScanner
	check("whole", &s, s.scan([]byte(respValid)))
	s = respScanner{}
	var err error
	for i := 0; i < len(respValid) && err == nil; i++ {
		err = s.scan([]byte{respValid[i]})
	}
	check("one byte per read", &s, err)
	small := respValid[:strings.Index(respValid, "$"+strconv.Itoa(maxReplyBulk))]
	for at := range len(small) + 1 {
		s = respScanner{}
		check("split at "+strconv.Itoa(at), &s, scanSplit(&s, small, at))
	}
}

// Each refused reply fails the read that ends its announcement at the
// latest (before go-redis can read the line), however the stream is split.
func TestRespScannerRefusesOverLimits(t *testing.T) {
	for _, c := range respRefused {
		t.Run(c.name, func(t *testing.T) {
			mark := strings.IndexByte(c.stream, '!')
			stream := c.stream[:mark] + c.stream[mark+1:]
			end := len(stream) // the offending line's '\n', or the end
			if i := strings.IndexByte(stream[mark:], '\n'); i >= 0 {
				end = mark + i
			}
			var s respScanner
			if err := s.scan([]byte(stream)); !errors.Is(err, errReplyRefused) {
				t.Fatalf("whole: %v", err)
			}
			s = respScanner{}
			at := -1
			for i := range len(stream) {
				if err := s.scan([]byte{stream[i]}); err != nil {
					if !errors.Is(err, errReplyRefused) {
						t.Fatal(err)
					}
					at = i
					break
				}
			}
			if at < 0 || at > end || at < mark {
				t.Fatalf("one byte per read: refused at byte %d, want in [%d, %d]", at, mark, end)
			}
			if len(stream) > 4096 {
				return
			}
			for split := range len(stream) + 1 {
				s = respScanner{}
				if err := scanSplit(&s, stream, split); !errors.Is(err, errReplyRefused) {
					t.Fatalf("split at %d: %v", split, err)
				}
			}
		})
	}
}

// chunkConn returns its chunks, one per Read.
type chunkConn struct {
	net.Conn
	chunks [][]byte
	i      int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if c.i == len(c.chunks) {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[c.i])
	c.i++
	return n, nil
}

// A read of normal replies allocates nothing.
func TestBoundedConnReadAllocatesNothing(t *testing.T) {
	reply := []byte("*10\r\n$1\r\n1\r\n$1\r\n0\r\n$2\r\n59\r\n$7\r\n1000000\r\n$1\r\n0\r\n$1\r\n0\r\n$1\r\n9\r\n$5\r\n60000\r\n$1\r\n0\r\n$16\r\n1893553445000000\r\n")
	var chunks [][]byte
	for i := range reply {
		chunks = append(chunks, reply[i:i+1])
	}
	chunks = append(chunks, reply)
	cc := &chunkConn{chunks: chunks}
	c := newBoundedConn(cc)
	buf := make([]byte, 4096)
	allocs := testenv.AllocsPerRun(10, func() {
		cc.i = 0
		for {
			if _, err := c.Read(buf); err != nil {
				if err != io.EOF {
					t.Fatal(err)
				}
				return
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run of reads", allocs)
	}
}

// fakeRedis is a TCP server that reads RESP commands and writes what answer
// returns for each ("" = nothing: the command goes unanswered). It returns
// its address; it is closed at cleanup.
func fakeRedis(t *testing.T, answer func(args []string) string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				rd := bufio.NewReader(c)
				for {
					args, err := readCommand(rd)
					if err != nil {
						return
					}
					if a := answer(args); a != "" {
						if _, err := io.WriteString(c, a); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// readCommand reads one command: an array of bulk strings.
func readCommand(rd *bufio.Reader) ([]string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil {
		return nil, err
	}
	args := make([]string, n)
	for i := range args {
		if line, err = rd.ReadString('\n'); err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil {
			return nil, err
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

// A server that answers admissions with a reply announcing a huge length
// (go-redis allocated it: 1 GB held, and with $99999999999 the process died
// of "runtime: out of memory") fails the admission as a backend error that
// on_backend_error decides, and the process allocates nothing near it.
func TestRedisHugeReplyIsABackendError(t *testing.T) {
	for _, length := range []string{"999999999", "99999999999"} {
		addr := fakeRedis(t, func(args []string) string {
			switch strings.ToUpper(args[0]) {
			case "HELLO":
				return "-ERR unknown command 'HELLO'\r\n"
			case "PING":
				return "+PONG\r\n"
			}
			return "$" + length + "\r\nabc"
		})
		for _, policy := range []string{FailOpen, FailClosed} {
			t.Run(length+"/"+policy, func(t *testing.T) {
				ts := []TenantConfig{tenant("acme", Limits{RPM: 60, MaxConcurrency: 2})}
				r := newTestRedis(t, "redis://"+addr, "gptest", ts, func(c *BackendConfig, _ *redisOptions) {
					c.OnBackendError, c.Redis.Timeout = policy, cfgtypes.Duration(time.Second)
				})
				m, err := newMetrics(prometheus.NewRegistry(), r.Name())
				if err != nil {
					t.Fatal(err)
				}
				g := newGate(r, m, 0)
				g.SetTenants(t0, ts)
				for i := range 3 {
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					var d Decision
					tk, _, err := g.Admit(context.Background(), &Request{Tenant: "acme"}, &d)
					runtime.ReadMemStats(&after)
					if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
						t.Errorf("%d: %d MiB allocated by one admission", i, grew>>20)
					}
					if !errors.Is(err, errReplyRefused) || d.Limit != limitBackend {
						t.Fatalf("%d: err %v, %+v: want the reply refused, a backend decision", i, err, d)
					}
					if policy == FailOpen && (!d.Allowed || d.statusCode() != 200) ||
						policy == FailClosed && (d.Allowed || d.statusCode() != 503) {
						t.Fatalf("%d: %s: %+v", i, policy, d)
					}
					g.Reconcile(context.Background(), tk, 0)
				}
			})
		}
	}
}

// Both kinds of client, a server's and a cluster's, dial through
// boundedDialer, and keep the socket for go-redis's health checks.
func TestRedisClientsDialBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, cluster := range []bool{false, true} {
		newClient, _, _, err := redisClients(RedisConfig{URL: "redis://" + ln.Addr().String(), Cluster: cluster}, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c := newClient()
		var dial func(context.Context, string, string) (net.Conn, error)
		switch c := c.(type) {
		case *redis.Client:
			dial = c.Options().Dialer
		case *redis.ClusterClient:
			dial = c.Options().Dialer
		}
		c.Close()
		if dial == nil {
			t.Fatalf("cluster %v: no dialer", cluster)
		}
		conn, err := dial(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
		if _, ok := conn.(*boundedSysConn); !ok {
			t.Fatalf("cluster %v: dialled a %T", cluster, conn)
		}
	}
}

// A server at Redis's address that does not speak Redis (an HTTP server:
// a wrong port) is said with what was refused. go-redis unwraps the error
// of a connection's handshake once, and the gateway logged only "redis
// reply refused".
func TestRedisNotRedisSaysWhat(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	r := newTestRedis(t, "redis://"+srv.Listener.Addr().String(), "gptest", nil, nil)
	err := r.client.Load().c.Ping(context.Background()).Err()
	if !errors.Is(err, errReplyRefused) || !strings.Contains(err.Error(), `a reply of unknown type 'H'`) {
		t.Fatalf("ping of an HTTP server: %v, want the reply refused, saying what it began with", err)
	}
}
