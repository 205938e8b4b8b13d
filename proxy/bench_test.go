package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goodput/goodput/sim"
)

// streamTimes is what a client saw of one stream: when it sent the request
// and when each complete event arrived.
type streamTimes struct {
	sent   time.Time
	events []time.Time
}

// readStream posts body to url and stamps each SSE event as it completes.
func readStream(client *http.Client, url, body, reqID string) (streamTimes, error) {
	var st streamTimes
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return st, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", reqID)
	st.sent = time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) == 1 && line[0] == '\n' {
			st.events = append(st.events, time.Now())
		}
		if err != nil {
			if bytes.Contains(line, []byte("[DONE]")) || err.Error() == "EOF" {
				return st, nil
			}
			return st, err
		}
	}
}

type latencySample struct {
	ttft  []float64 // client-observed TTFT, µs
	event []float64 // client receive time − simulator flush time, per token event, µs
}

// runStreams sends n streams at concurrency c to base and collects client
// timings against the simulator's trace.
func runStreams(b *testing.B, s *sim.Server, client *http.Client, base, tag string, n, c, tokens int) latencySample {
	var mu sync.Mutex
	var out latencySample
	var wg sync.WaitGroup
	sem := make(chan struct{}, c)
	body := fmt.Sprintf(`{"model":"sim-llama","stream":true,"max_tokens":%d,"ignore_eos":true,"messages":[{"role":"user","content":"hello there"}]}`, tokens)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			id := fmt.Sprintf("%s-%d", tag, i)
			st, err := readStream(client, base+"/v1/chat/completions", body, id)
			if err != nil {
				b.Error(err)
				return
			}
			tr, err := s.WaitTrace(context.Background(), id)
			if err != nil {
				b.Error(err)
				return
			}
			toks := tr.TokenEvents()
			mu.Lock()
			defer mu.Unlock()
			if len(st.events) < len(toks) {
				b.Errorf("%s: %d events seen, %d token events sent", id, len(st.events), len(toks))
				return
			}
			out.ttft = append(out.ttft, float64(st.events[0].Sub(st.sent))/1e3)
			for k, e := range toks {
				out.event = append(out.event, float64(st.events[k].Sub(e.At))/1e3)
			}
		}(i)
	}
	wg.Wait()
	return out
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func pct(v []float64, p float64) float64 {
	a := append([]float64(nil), v...)
	sort.Float64s(a)
	if len(a) == 0 {
		return 0
	}
	pos := p * float64(len(a)-1)
	lo := int(pos)
	if lo+1 >= len(a) {
		return a[lo]
	}
	return a[lo] + (pos-float64(lo))*(a[lo+1]-a[lo])
}

// BenchmarkAddedLatency measures what the gateway adds to TTFT and to each
// event's delivery, against direct connections to the simulator in the same
// run (alternating, so machine noise hits both alike). Reported metrics, in
// µs: added TTFT at p50/p99 and added per-event delivery delay (which is
// what each ITL gap can grow by) at p50/p99.
//
//	go test -run '^$' -bench AddedLatency -benchtime 1x -count 5 ./proxy
func BenchmarkAddedLatency(b *testing.B) {
	for _, c := range []int{1, 256} {
		b.Run(fmt.Sprintf("streams=%d", c), func(b *testing.B) {
			s, simURL := startSim(b, sim.Config{TTFT: 20 * time.Millisecond, ITL: 10 * time.Millisecond})
			g := startBenchGateway(b, simURL)
			client := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0}}
			n := c * 2
			if n < 32 {
				n = 32
			}
			relay := startRelay(b, strings.TrimPrefix(simURL, "http://"))
			// Warm every path first: connection pools start empty, and a
			// gateway in production runs with warm pools.
			runStreams(b, s, client, simURL, "wd", c, c, 2)
			runStreams(b, s, client, relay, "wr", c, c, 2)
			runStreams(b, s, client, g, "wg", c, c, 2)
			b.ResetTimer()
			var direct, rel, gw latencySample
			var cpuDirect, cpuRelay, cpuGW time.Duration
			for i := 0; i < b.N; i++ {
				c0 := cpuTime()
				d := runStreams(b, s, client, simURL, fmt.Sprintf("d%d", i), n, c, 30)
				c1 := cpuTime()
				r := runStreams(b, s, client, relay, fmt.Sprintf("r%d", i), n, c, 30)
				c2 := cpuTime()
				v := runStreams(b, s, client, g, fmt.Sprintf("g%d", i), n, c, 30)
				cpuDirect += c1 - c0
				cpuRelay += c2 - c1
				cpuGW += cpuTime() - c2
				direct.ttft = append(direct.ttft, d.ttft...)
				direct.event = append(direct.event, d.event...)
				rel.ttft = append(rel.ttft, r.ttft...)
				rel.event = append(rel.event, r.event...)
				gw.ttft = append(gw.ttft, v.ttft...)
				gw.event = append(gw.event, v.event...)
			}
			b.ReportMetric(pct(gw.ttft, .5)-pct(direct.ttft, .5), "added-ttft-p50-µs")
			b.ReportMetric(pct(gw.ttft, .99)-pct(direct.ttft, .99), "added-ttft-p99-µs")
			b.ReportMetric(pct(gw.event, .5)-pct(direct.event, .5), "added-itl-p50-µs")
			b.ReportMetric(pct(gw.event, .99)-pct(direct.event, .99), "added-itl-p99-µs")
			b.ReportMetric(pct(direct.event, .5), "direct-event-p50-µs")
			// The floor: what a bare TCP relay adds, measured alongside.
			b.ReportMetric(pct(rel.ttft, .5)-pct(direct.ttft, .5), "relay-added-ttft-p50-µs")
			b.ReportMetric(pct(rel.event, .5)-pct(direct.event, .5), "relay-added-itl-p50-µs")
			b.ReportMetric(pct(rel.event, .99)-pct(direct.event, .99), "relay-added-itl-p99-µs")
			// Process CPU (client, simulator and proxy share it) with the
			// gateway or the relay in the path, minus without, per event
			// that crossed it.
			b.ReportMetric(float64(cpuGW-cpuDirect)/1e3/float64(len(gw.event)), "gateway-cpu-µs/event")
			b.ReportMetric(float64(cpuRelay-cpuDirect)/1e3/float64(len(rel.event)), "relay-cpu-µs/event")
		})
	}
}

// startRelay runs the cheapest proxy that forwards each event as it
// arrives: a TCP relay, one read and one write per event in each direction
// (a user-space copy, as HAProxy or nginx do by default; no splice), no HTTP
// parsing at all. What it adds is the floor for any inline proxy on this
// machine.
func startRelay(b *testing.B, upstream string) string {
	ln, err := listenLoopback()
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.(*net.TCPConn).CloseWrite()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go pipe(u, c)
			go pipe(c, u)
			b.Cleanup(func() { c.Close(); u.Close() })
		}
	}()
	b.Cleanup(func() { ln.Close(); wg.Wait() })
	return "http://" + ln.Addr().String()
}

// startBenchGateway runs a gateway whose records go nowhere, on a Listener
// as the binary runs it (its connections read and write raw, keep t0).
func startBenchGateway(b *testing.B, upstream string) string {
	cfg := Config{Upstream: upstream, Sink: RecordFunc(func(*meterRecord) {})}
	p, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := listenLoopback()
	if err != nil {
		b.Fatal(err)
	}
	srv := p.Server()
	go srv.Serve(NewListener(ln, 0, nil))
	b.Cleanup(func() { srv.Shutdown(); p.Wait(); p.CloseIdle() })
	return "http://" + ln.Addr().String()
}

// BenchmarkHeapPerStream holds streams open through the gateway and
// reports the gateway's heap per in-flight stream: heap with n streams via
// the gateway minus heap with n direct streams, over n; and the same of
// goroutine stacks (StackInuse), and of both. The gateway has served n
// longer streams before (see the warm-up).
//
//	go test -run '^$' -bench HeapPerStream -benchtime 1x -count 5 ./proxy
func BenchmarkHeapPerStream(b *testing.B) {
	const n = 256
	// No traces: the simulator would keep one per request, and the
	// gateway's rounds (warm-up included) send it more than the direct ones.
	s, simURL := startSim(b, sim.Config{TTFT: 0, ITL: 2 * time.Second, MaxTraces: -1})
	g := startBenchGateway(b, simURL)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 1024}}
	heapWith := func(base, tag string) (heap, stack float64) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		started := make(chan struct{}, n)
		body := `{"model":"sim-llama","stream":true,"max_tokens":3,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("X-Request-Id", fmt.Sprintf("%s-%d", tag, i))
				resp, err := client.Do(req)
				if err != nil {
					started <- struct{}{}
					return
				}
				buf := make([]byte, 256)
				resp.Body.Read(buf) // the first event: the stream is in flight
				started <- struct{}{}
				<-ctx.Done()
				resp.Body.Close()
			}(i)
		}
		for i := 0; i < n; i++ {
			<-started
		}
		time.Sleep(50 * time.Millisecond)
		// Two collections empty sync.Pools (victim cache included): pooled
		// buffers are not held by a stream.
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		cancel()
		wg.Wait()
		return float64(ms.HeapInuse), float64(ms.StackInuse)
	}
	_ = s
	// Before the streams through the gateway, n streams of 100 tokens
	// each, at once: the gateway's pools then hold what a gateway in
	// steady use holds (streams whose meters have grown, records that
	// listed a stream's gaps), not what a fresh process has.
	warm := func() {
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				body := `{"model":"sim-llama","stream":true,"max_tokens":100,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`
				req, _ := http.NewRequest("POST", g+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("X-Sim-ITL", "1ms")
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}(i)
		}
		wg.Wait()
	}
	var per, perStack, perBoth []float64
	for i := 0; i < b.N; i++ {
		runtime.GC()
		dh, ds := heapWith(simURL, fmt.Sprintf("hd%d", i))
		time.Sleep(100 * time.Millisecond)
		runtime.GC()
		warm()
		vh, vs := heapWith(g, fmt.Sprintf("hg%d", i))
		per = append(per, (vh-dh)/n)
		perStack = append(perStack, (vs-ds)/n)
		perBoth = append(perBoth, (vh+vs-dh-ds)/n)
		time.Sleep(100 * time.Millisecond)
	}
	b.ReportMetric(pct(per, .5)/1024, "gateway-heap-KiB/stream")
	b.ReportMetric(pct(perStack, .5)/1024, "gateway-stack-KiB/stream")
	b.ReportMetric(pct(perBoth, .5)/1024, "gateway-heap+stack-KiB/stream")
}

// BenchmarkRequestCost sends requests one after another on one keep-alive
// connection, to the simulator directly and through the gateway,
// alternating 500-request rounds, and reports what the gateway adds per
// request: allocations (the process's, client and simulator included, so
// the difference is the gateway's) and wall time. A request is a
// five-token stream answered at once.
//
//	go test -run '^$' -bench RequestCost -benchtime 6x -count 3 ./proxy
func BenchmarkRequestCost(b *testing.B) {
	_, simURL := startSim(b, sim.Config{})
	g := startBenchGateway(b, simURL)
	req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(simChat), simChat)
	type client struct {
		conn net.Conn
		br   *bufio.Reader
	}
	dial := func(url string) client {
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return client{c, bufio.NewReader(c)}
	}
	// round sends n requests and reads each answer to its last chunk.
	round := func(c client, n int) (allocs uint64, took time.Duration) {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		start := time.Now()
		for range n {
			if _, err := c.conn.Write([]byte(req)); err != nil {
				b.Fatal(err)
			}
			for {
				line, err := c.br.ReadSlice('\n')
				if err != nil {
					b.Fatal(err)
				}
				if string(line) == "0\r\n" {
					if _, err := c.br.ReadSlice('\n'); err != nil {
						b.Fatal(err)
					}
					break
				}
			}
		}
		took = time.Since(start)
		runtime.ReadMemStats(&m1)
		return m1.Mallocs - m0.Mallocs, took
	}
	direct, via := dial(simURL), dial(g)
	const n = 500
	round(direct, n) // warm both paths: pools, buffers, the upstream connection
	round(via, n)
	var allocs, micros []float64
	b.ResetTimer()
	for range b.N {
		da, dt := round(direct, n)
		ga, gt := round(via, n)
		allocs = append(allocs, (float64(ga)-float64(da))/n)
		micros = append(micros, float64(gt-dt)/1e3/n)
	}
	b.ReportMetric(pct(allocs, .5), "added-allocs/req")
	b.ReportMetric(pct(micros, .5), "added-µs/req")
}

// BenchmarkRequestCostCold is BenchmarkRequestCost with many connections
// interleaved, as under load: a round writes one request on each of conns
// connections, then reads each answer to its last chunk, so the gateway
// has every request of the round in flight at once and each finds its
// data cold. Rounds to the simulator directly and through the gateway
// alternate; reported is what the gateway adds per request, in wall time
// and in the process's CPU time (getrusage: client and simulator included,
// so the difference is the gateway's). small is the yardstick's request
// (a 130-byte body); large has a 20 KiB prompt, a body the budget counts.
//
//	go test -run '^$' -bench RequestCostCold -benchtime 6x -count 3 ./proxy
func BenchmarkRequestCostCold(b *testing.B) {
	const conns, rounds = 256, 4
	large := strings.Replace(simChat, "hello there", "hello there"+strings.Repeat(" again", 20<<10/6), 1)
	for _, c := range []struct{ name, body string }{{"small", simChat}, {"large", large}} {
		b.Run(c.name, func(b *testing.B) {
			_, simURL := startSim(b, sim.Config{})
			g := startBenchGateway(b, simURL)
			req := []byte(fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(c.body), c.body))
			type client struct {
				conn net.Conn
				br   *bufio.Reader
			}
			dial := func(url string) []client {
				cs := make([]client, conns)
				for i := range cs {
					c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { c.Close() })
					cs[i] = client{c, bufio.NewReader(c)}
				}
				return cs
			}
			cpu := func() time.Duration {
				var ru syscall.Rusage
				syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
				return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			}
			// round sends n requests on each connection, one on each in
			// turn, and reads the answers in the same order.
			round := func(cs []client, n int) (took, used time.Duration) {
				start, c0 := time.Now(), cpu()
				for range n {
					for _, c := range cs {
						if _, err := c.conn.Write(req); err != nil {
							b.Fatal(err)
						}
					}
					for _, c := range cs {
						for {
							line, err := c.br.ReadSlice('\n')
							if err != nil {
								b.Fatal(err)
							}
							if string(line) == "0\r\n" {
								if _, err := c.br.ReadSlice('\n'); err != nil {
									b.Fatal(err)
								}
								break
							}
						}
					}
				}
				return time.Since(start), cpu() - c0
			}
			direct, via := dial(simURL), dial(g)
			round(direct, rounds) // warm both paths: pools, buffers, upstream connections
			round(via, rounds)
			var micros, cpus []float64
			b.ResetTimer()
			for range b.N {
				dt, dc := round(direct, rounds)
				gt, gc := round(via, rounds)
				micros = append(micros, float64(gt-dt)/1e3/(conns*rounds))
				cpus = append(cpus, float64(gc-dc)/1e3/(conns*rounds))
			}
			b.ReportMetric(pct(micros, .5), "added-µs/req")
			b.ReportMetric(pct(cpus, .5), "added-cpu-µs/req")
		})
	}
}
