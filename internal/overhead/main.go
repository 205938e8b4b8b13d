// Command overhead measures what a proxy in the streaming path costs: the
// latency it adds to time to first token and to every later event, the CPU
// it spends per event and the memory it holds per concurrent stream, for
// goodput, nginx and HAProxy side by side (issue 12: goodput should be as
// light as nginx).
//
// Run it from the repository's root:
//
//	go run ./internal/overhead                                   # the full table (about 10 minutes)
//	go run ./internal/overhead --streams 32 --duration 3s --rounds 1   # a quick look
//
// Flags: --streams (concurrent streams, a comma-separated list; default
// 32,256,1024), --duration (measured window of each round; 10s),
// --warmup (load before the window; 2s), --rounds (3), --proxies
// (goodput,nginx,haproxy by default; also proto-goroutine, proto-epoll,
// proto-epoll-netpoll, goodput-base and goodput-loop), --seed, --goodput-bin (a prebuilt
// goodput; default: go build ./cmd/goodput into a temporary directory),
// --base-bin (a second goodput binary, run as the target goodput-base: an
// earlier build, measured in the same interleaved rounds), -v (every
// round's raw figures), --json FILE (every figure, for other tools).
//
// proto-goroutine and proto-epoll are the two I/O-model prototypes of
// ./internal/overhead/protoproxy (issue 12, item 3), built from the
// checkout: the gateway's stream path outside fasthttp (parse the head
// once, then read → meter → write, with the meter package's framer,
// parser and meter on every event), one with a goroutine per connection
// on Go's poller, one with an edge-triggered epoll loop per core. They run
// as separate processes like the other proxies. proto-epoll-netpoll is the
// epoll model with its loops as plain goroutines parked in Go's poller
// (on their epoll fd) instead of threads of their own, as a loop inside
// the gateway would have to be.
//
// The set-up: one scripted OpenAI-compatible engine in this process (raw
// HTTP/1.1, keep-alive, chunked text/event-stream): after a time to first
// token of 10-20 ms it writes 30-100 chat.completion.chunk events (the
// number and every gap drawn uniformly from the seed and the request's id,
// gaps 10-20 ms), then the finish chunk, the usage chunk and [DONE], one
// write per event, stamping each write on the process's monotonic clock.
// The client, also in this process, holds --streams streams in flight on
// as many keep-alive connections (a closed loop: a connection sends its
// next request when its stream ends), decodes the chunked SSE itself and
// stamps each event when the read that completes it returns. Each proxy
// is a separate process, started anew for every round with a generated
// configuration (goodput: no request log, no keys; nginx: worker_processes
// auto, proxy_buffering off, upstream keepalive 1024; HAProxy: nbthread 2,
// keep-alive to the server, http-no-delay; the prototypes: --model).
// Rounds interleave: direct, then the proxies in --proxies order, then
// again, and a figure is the median of its rounds.
//
// The figures, per round, over the requests started in the measured window:
//
//   - added TTFT: per request, (client TTFT − engine TTFT), the client's
//     from its request write to the first event's arrival, the engine's
//     from reading the request to writing the first event; p50 and p99
//     through the proxy minus p50 and p99 of the direct round.
//   - added ITL: per event after the first, the delivery delay (arrival at
//     the client − the engine's write); p50 and p99 through the proxy minus
//     those of the direct round. A proxy that delays event k by d shifts
//     the gap before it by d, so this bounds what it adds to ITL.
//   - CPU: utime+stime of the proxy's processes (nginx: the master and its
//     workers) from /proc/PID/stat over the window, per 1,000 events the
//     client received in it.
//   - RSS per stream: (peak VmRSS of the proxy's processes during the
//     round, sampled every 50 ms − VmRSS before the round's load, after one
//     request went through) / streams.
//
// The engine and the client share the machine's cores with the proxy:
// their cost is the same in every round, but on a loaded machine the
// latencies include scheduling delays. It is a command, not a test: it
// asserts nothing.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type options struct {
	streams    []int
	duration   time.Duration
	warmup     time.Duration
	rounds     int
	proxies    []string
	seed       uint64
	goodputBin string
	baseBin    string
	verbose    bool
	jsonFile   string
	phases     bool
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "overhead:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("overhead", flag.ContinueOnError)
	fs.SetOutput(stderr)
	streams := fs.String("streams", "32,256,1024", "concurrent streams, comma-separated")
	duration := fs.Duration("duration", 10*time.Second, "measured window of each round")
	warmup := fs.Duration("warmup", 2*time.Second, "load before each round's window")
	rounds := fs.Int("rounds", 3, "rounds per stream count (figures are medians of rounds)")
	proxies := fs.String("proxies", "goodput,nginx,haproxy", "proxies to measure, comma-separated: goodput, goodput-base (the --base-bin binary), goodput-loop (goodput with io_loop: true: direct streams read by I/O loops), nginx, haproxy, proto-goroutine, proto-epoll, proto-epoll-netpoll (the I/O-model prototypes of ./internal/overhead/protoproxy; the last is the epoll model with its loops parked in Go's poller)")
	seed := fs.Uint64("seed", 1, "seed of the engine's script")
	bin := fs.String("goodput-bin", "", "a prebuilt goodput binary (default: build ./cmd/goodput)")
	base := fs.String("base-bin", "", "a second goodput binary, measured as goodput-base with the same configuration (an earlier build to compare with, in the same run)")
	verbose := fs.Bool("v", false, "print every round's raw figures")
	jsonFile := fs.String("json", "", "write every figure to this file as JSON")
	phases := fs.Bool("phases", false, "also print goodput's own time per step of a request's way in and of its first event, from a goodput built with -tags phases (built so when --goodput-bin is not given; --base-bin must be one too), whose marks take a lock about 13 times a request: its other figures are that build's, not the gateway's")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o := options{duration: *duration, warmup: *warmup, rounds: *rounds, seed: *seed,
		goodputBin: *bin, baseBin: *base, verbose: *verbose, jsonFile: *jsonFile, phases: *phases}
	for s := range strings.SplitSeq(*streams, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 8192 {
			return options{}, fmt.Errorf("--streams: %q is not a count from 1 to 8192", s)
		}
		o.streams = append(o.streams, n)
	}
	for p := range strings.SplitSeq(*proxies, ",") {
		p = strings.TrimSpace(p)
		switch p {
		case "goodput", "goodput-base", "goodput-loop", "nginx", "haproxy", "proto-goroutine", "proto-epoll", "proto-epoll-netpoll":
			if !slices.Contains(o.proxies, p) {
				o.proxies = append(o.proxies, p)
			}
		case "":
		default:
			return options{}, fmt.Errorf("--proxies: unknown proxy %q (goodput, goodput-base, goodput-loop, nginx, haproxy, proto-goroutine, proto-epoll, proto-epoll-netpoll)", p)
		}
	}
	if slices.Contains(o.proxies, "goodput-base") != (o.baseBin != "") {
		return options{}, errors.New("--proxies goodput-base and --base-bin go together")
	}
	if o.duration < 500*time.Millisecond || o.warmup < 0 || o.rounds < 1 {
		return options{}, errors.New("--duration must be at least 500ms, --warmup not negative, --rounds at least 1")
	}
	return o, nil
}

// roundResult is one round of one target at one stream count.
type roundResult struct {
	Target   string `json:"target"`
	Streams  int    `json:"streams"`
	Round    int    `json:"round"`
	Requests int    `json:"requests"` // completed in the window
	Errors   int    `json:"errors"`
	// FirstError says what the first error was.
	FirstError string `json:"first_error,omitempty"`
	// Events is the number of events the client received in the window.
	Events int `json:"events"`
	// TTFTOver: client TTFT − engine TTFT, per request (ms).
	TTFTOverP50 num `json:"ttft_over_engine_p50_ms"`
	TTFTOverP99 num `json:"ttft_over_engine_p99_ms"`
	// TTFT over the engine's, in its two legs (ms): the request's (the
	// engine's receipt − the client's send) and the first event's (the
	// client's receipt − the engine's write). Their percentiles need not
	// add up to TTFTOver's.
	RequestLegP50    num `json:"request_leg_p50_ms"`
	FirstEventLegP50 num `json:"first_event_leg_p50_ms"`
	RequestLegP99    num `json:"request_leg_p99_ms"`
	FirstEventLegP99 num `json:"first_event_leg_p99_ms"`
	// Delay: arrival − the engine's write, per event after the first (ms).
	DelayP50 num `json:"delivery_delay_p50_ms"`
	DelayP99 num `json:"delivery_delay_p99_ms"`
	// Added figures: these minus the direct round's (proxies only).
	AddedTTFTP50 num `json:"added_ttft_p50_ms"`
	AddedTTFTP99 num `json:"added_ttft_p99_ms"`
	AddedITLP50  num `json:"added_itl_p50_ms"`
	AddedITLP99  num `json:"added_itl_p99_ms"`
	// CPU of the proxy over the window (ms), and per 1,000 events.
	ProxyCPUms     num   `json:"proxy_cpu_ms"`
	CPUPer1kEvents num   `json:"proxy_cpu_ms_per_1k_events"`
	IdleRSSKiB     int64 `json:"idle_rss_kib"`
	PeakRSSKiB     int64 `json:"peak_rss_kib"`
	// HWMKiB is the processes' VmHWM summed at the end of the round: a
	// check that sampling every 50 ms did not miss a higher peak (it also
	// covers the start, before the idle reading).
	HWMKiB          int64  `json:"vmhwm_kib"`
	RSSPerStreamKiB num    `json:"rss_per_stream_kib"`
	BenchCPUms      num    `json:"bench_cpu_ms"` // engine + client, this process
	LoadAvg         string `json:"loadavg_after"`
	ProxyProcesses  int    `json:"proxy_processes,omitempty"`
	WindowSeconds   num    `json:"window_s"`
	// UpstreamConns is how many connections the engine accepted during
	// the round's load (warm-up, window and drain).
	UpstreamConns int64 `json:"engine_connections_accepted"`
	// Phases: goodput's own time per step over the window (--phases).
	Phases []phaseFigure `json:"phases,omitempty"`
}

type report struct {
	Started   time.Time     `json:"started"`
	CPUs      int           `json:"cpus"`
	LoadStart string        `json:"loadavg_start"`
	LoadEnd   string        `json:"loadavg_end"`
	Args      []string      `json:"args"`
	Skipped   []string      `json:"skipped,omitempty"`
	Rounds    []roundResult `json:"rounds"`
	Summary   []summaryRow  `json:"summary"`
}

type summaryRow struct {
	Streams int            `json:"streams"`
	Target  string         `json:"target"`
	Median  map[string]num `json:"median"`
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	rep := report{Started: time.Now().UTC(), CPUs: runtime.NumCPU(), LoadStart: loadAvg(), Args: args}
	raiseNoFile(stderr)

	tmp, err := os.MkdirTemp("", "goodput-overhead-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	targets := []target{{name: "direct", label: "direct"}}
	for _, name := range o.proxies {
		t, why := makeTarget(name, o, tmp, stderr)
		if why != "" {
			fmt.Fprintf(stdout, "skipping %s: %s\n", name, why)
			rep.Skipped = append(rep.Skipped, name+": "+why)
			continue
		}
		targets = append(targets, t)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	clk := clock{base: time.Now()}
	eng := &engine{ln: ln, clk: clk, seed: o.seed, reg: newRegistry()}
	go eng.serve()
	b := &bench{o: o, clk: clk, eng: eng, engineAddr: ln.Addr().String(), tmp: tmp, log: stderr}

	fmt.Fprintf(stdout, "machine: %d CPUs, load average %s at start\n", rep.CPUs, rep.LoadStart)
	for _, n := range o.streams {
		for r := range o.rounds {
			var direct *roundResult
			for _, t := range targets {
				res, err := b.round(t, n, r)
				if err != nil {
					return fmt.Errorf("%s, %d streams, round %d: %w", t.name, n, r+1, err)
				}
				if t.name == "direct" {
					direct = &res
				} else if direct != nil {
					res.AddedTTFTP50 = res.TTFTOverP50 - direct.TTFTOverP50
					res.AddedTTFTP99 = res.TTFTOverP99 - direct.TTFTOverP99
					res.AddedITLP50 = res.DelayP50 - direct.DelayP50
					res.AddedITLP99 = res.DelayP99 - direct.DelayP99
				}
				rep.Rounds = append(rep.Rounds, res)
				if o.verbose {
					printRound(stdout, res)
				} else {
					fmt.Fprintf(stderr, "  %d streams, round %d/%d, %s done\n", n, r+1, o.rounds, t.name)
				}
			}
		}
	}
	rep.LoadEnd = loadAvg()
	rep.Summary = summarize(rep.Rounds, o.streams, targets)
	printTable(stdout, rep, targets, o)
	printPhases(stdout, rep.Rounds, o.streams, targets)
	if o.jsonFile != "" {
		js, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonFile, append(js, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// makeTarget finds (or builds) the proxy's binary; why says why not.
func makeTarget(name string, o options, tmp string, stderr io.Writer) (target, string) {
	switch name {
	case "goodput", "goodput-loop":
		bin := o.goodputBin
		if bin == "" {
			bin = filepath.Join(tmp, "goodput")
		}
		if _, err := os.Stat(bin); err != nil && o.goodputBin == "" { // built once for both
			args := []string{"build", "-o", bin, "./cmd/goodput"}
			if o.phases {
				args = []string{"build", "-tags", "phases", "-o", bin, "./cmd/goodput"}
			}
			fmt.Fprintf(stderr, "building goodput (go %s)\n", strings.Join(args, " "))
			cmd := exec.Command("go", args...)
			cmd.Stdout, cmd.Stderr = stderr, stderr
			if err := cmd.Run(); err != nil {
				return target{}, "go build ./cmd/goodput failed (run from the repository's root): " + err.Error()
			}
		}
		if name == "goodput-loop" {
			// The I/O loops' experiment (io_loop, proxy/ioloop_linux.go).
			return target{name: name, label: name, bin: bin, config: goodputLoopConfig, phases: o.phases}, ""
		}
		return target{name: name, label: name, bin: bin, config: goodputConfig, phases: o.phases}, ""
	case "goodput-base":
		return target{name: name, label: "goodput-base", bin: o.baseBin, config: goodputConfig, phases: o.phases}, ""
	case "proto-goroutine", "proto-epoll", "proto-epoll-netpoll":
		bin := filepath.Join(tmp, "protoproxy")
		if _, err := os.Stat(bin); err != nil {
			fmt.Fprintln(stderr, "building the prototypes (go build ./internal/overhead/protoproxy)")
			cmd := exec.Command("go", "build", "-o", bin, "./internal/overhead/protoproxy")
			cmd.Stdout, cmd.Stderr = stderr, stderr
			if err := cmd.Run(); err != nil {
				return target{}, "go build ./internal/overhead/protoproxy failed (run from the repository's root): " + err.Error()
			}
		}
		return target{name: name, label: name, bin: bin, config: protoConfig(name)}, ""
	case "nginx":
		bin, err := findBinary("nginx")
		if err != nil {
			return target{}, err.Error() + " (Debian package nginx)"
		}
		return target{name: name, label: "nginx", bin: bin, config: nginxConfig, tree: true}, ""
	default:
		bin, err := findBinary("haproxy")
		if err != nil {
			return target{}, err.Error() + " (Debian package haproxy)"
		}
		return target{name: name, label: "HAProxy", bin: bin, config: haproxyConfig}, ""
	}
}

func raiseNoFile(stderr io.Writer) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			fmt.Fprintf(stderr, "raising the open-files limit: %v\n", err)
		}
	}
	if lim.Cur < 8192 {
		fmt.Fprintf(stderr, "warning: open-files limit %d; 1,024 streams through a proxy need about 4,100\n", lim.Cur)
	}
}

type bench struct {
	o          options
	clk        clock
	eng        *engine
	engineAddr string
	tmp        string
	log        io.Writer
}

// workerResult is what one client connection measured.
type workerResult struct {
	ttft     []int64 // client TTFT − engine TTFT per request (ns)
	reqLeg   []int64 // the engine's receipt − the client's send (ns)
	firstLeg []int64 // the client's first event − the engine's write of it (ns)
	delays   []int64 // delivery delay per event after the first (ns)
	events   int     // events received in the window
	requests int
	errors   int
	firstErr string
}

// round runs one round of target t at n streams.
func (b *bench) round(t target, n, r int) (roundResult, error) {
	res := roundResult{Target: t.name, Streams: n, Round: r + 1}
	addr := b.engineAddr
	var p *proc
	if t.bin != "" {
		dir, err := os.MkdirTemp(b.tmp, fmt.Sprintf("%s-%d-%d-", t.name, n, r))
		if err != nil {
			return res, err
		}
		p, err = t.start(dir, b.engineAddr)
		if err != nil {
			return res, err
		}
		defer p.stop()
		addr = p.listen
		res.ProxyProcesses = len(p.pids)
		if p.phases != "" {
			if _, err := readPhases(p.phases); err != nil {
				return res, errNoPhases
			}
		}
	}
	// One request through first: the path works, and the idle RSS is that
	// of a proxy that has served a request.
	warm := &conn{addr: addr}
	for i := range 1 {
		id := uint64(1)<<62 + uint64(i)
		rec := b.eng.reg.add(id)
		_, stamps, err := warm.do(b.clk, id)
		if err != nil {
			b.eng.reg.take(id)
			msg := ""
			if p != nil {
				msg = ": " + tail(p.logf)
			}
			return res, fmt.Errorf("a first request failed: %w%s", err, msg)
		}
		<-rec.done
		if len(stamps) != len(rec.engineT) {
			return res, fmt.Errorf("a first request got %d events, the engine wrote %d", len(stamps), len(rec.engineT))
		}
	}
	warm.close()
	if p != nil {
		time.Sleep(200 * time.Millisecond)
		res.IdleRSSKiB = rssKiB(p.pids)
	}

	start := b.clk.now()
	ws := start + int64(b.o.warmup)
	we := ws + int64(b.o.duration)

	// CPU at the window's edges, and the RSS sampler.
	var cpu0, cpu1, self0, self1 uint64
	var phasesErr error
	edgesDone := make(chan struct{})
	go func() {
		defer close(edgesDone)
		time.Sleep(time.Duration(ws - b.clk.now()))
		cpu0, self0 = b.proxyTicks(p), cpuTicks([]int{os.Getpid()})
		var d0 phaseDump
		if p != nil && p.phases != "" {
			// The warm-up's figures, dropped: the window's start afresh.
			d0, phasesErr = signalPhases(p.pids[0], p.phases, 0)
		}
		time.Sleep(time.Duration(we - b.clk.now()))
		cpu1, self1 = b.proxyTicks(p), cpuTicks([]int{os.Getpid()})
		if p != nil && p.phases != "" && phasesErr == nil {
			var d phaseDump
			d, phasesErr = signalPhases(p.pids[0], p.phases, d0.Seq)
			res.Phases = d.Phases
		}
	}()
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		if p == nil {
			return
		}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampler:
				return
			case <-tick.C:
			}
			if rss := rssKiB(p.pids); rss > res.PeakRSSKiB {
				res.PeakRSSKiB = rss
			}
		}
	}()

	accepted0 := b.eng.accepted.Load()
	var ids idCounter
	results := make([]workerResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = b.worker(addr, &ids, ws, we)
		}()
	}
	wg.Wait()
	res.UpstreamConns = b.eng.accepted.Load() - accepted0
	<-edgesDone
	close(stopSampler)
	<-samplerDone
	if phasesErr != nil {
		return res, fmt.Errorf("goodput's phases: %w", phasesErr)
	}
	if p != nil {
		res.HWMKiB = sumStatusKiB(p.pids, "VmHWM")
	}

	var ttft, delays, reqLeg, firstLeg []int64
	for _, w := range results {
		ttft = append(ttft, w.ttft...)
		reqLeg = append(reqLeg, w.reqLeg...)
		firstLeg = append(firstLeg, w.firstLeg...)
		delays = append(delays, w.delays...)
		res.Events += w.events
		res.Requests += w.requests
		res.Errors += w.errors
		if res.FirstError == "" {
			res.FirstError = w.firstErr
		}
	}
	slices.Sort(ttft)
	slices.Sort(delays)
	res.TTFTOverP50 = num(percentile(ttft, 0.50) / 1e6)
	res.TTFTOverP99 = num(percentile(ttft, 0.99) / 1e6)
	slices.Sort(reqLeg)
	slices.Sort(firstLeg)
	res.RequestLegP50 = num(percentile(reqLeg, 0.50) / 1e6)
	res.FirstEventLegP50 = num(percentile(firstLeg, 0.50) / 1e6)
	res.RequestLegP99 = num(percentile(reqLeg, 0.99) / 1e6)
	res.FirstEventLegP99 = num(percentile(firstLeg, 0.99) / 1e6)
	res.DelayP50 = num(percentile(delays, 0.50) / 1e6)
	res.DelayP99 = num(percentile(delays, 0.99) / 1e6)
	res.WindowSeconds = num(b.o.duration.Seconds())
	res.BenchCPUms = num(float64(self1-self0) * 1000 / clkTck)
	res.LoadAvg = loadAvg()
	nan := num(math.NaN())
	res.AddedTTFTP50, res.AddedTTFTP99, res.AddedITLP50, res.AddedITLP99 = nan, nan, nan, nan
	res.ProxyCPUms, res.CPUPer1kEvents, res.RSSPerStreamKiB = nan, nan, nan
	if p != nil {
		res.ProxyCPUms = num(float64(cpu1-cpu0) * 1000 / clkTck)
		if res.Events > 0 {
			res.CPUPer1kEvents = res.ProxyCPUms / num(res.Events) * 1000
		}
		res.RSSPerStreamKiB = num(float64(res.PeakRSSKiB-res.IdleRSSKiB) / float64(n))
	}
	return res, nil
}

func (b *bench) proxyTicks(p *proc) uint64 {
	if p == nil {
		return 0
	}
	return cpuTicks(p.pids)
}

type idCounter struct {
	mu sync.Mutex
	n  uint64
}

func (c *idCounter) next() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n - 1
}

// worker is one client connection in the closed loop: it starts requests
// until the window ends and records those started in it.
func (b *bench) worker(addr string, ids *idCounter, ws, we int64) workerResult {
	var w workerResult
	c := &conn{addr: addr}
	defer c.close()
	for b.clk.now() < we {
		id := ids.next()
		rec := b.eng.reg.add(id)
		sent, stamps, err := c.do(b.clk, id)
		if err != nil {
			w.fail(err)
			if b.eng.reg.take(id) == nil { // the engine has it: wait for its end
				<-rec.done
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		select {
		case <-rec.done:
		case <-time.After(10 * time.Second):
			w.fail(errors.New("the engine never saw a request that was answered"))
			continue
		}
		for _, t := range stamps {
			if t >= ws && t < we {
				w.events++
			}
		}
		if sent < ws {
			continue
		}
		if len(stamps) != len(rec.engineT) {
			w.fail(fmt.Errorf("received %d events, the engine wrote %d", len(stamps), len(rec.engineT)))
			continue
		}
		w.requests++
		w.ttft = append(w.ttft, (stamps[0]-sent)-(rec.engineT[0]-rec.engineRecv))
		w.reqLeg = append(w.reqLeg, rec.engineRecv-sent)
		w.firstLeg = append(w.firstLeg, stamps[0]-rec.engineT[0])
		for k := 1; k < len(stamps); k++ {
			w.delays = append(w.delays, stamps[k]-rec.engineT[k])
		}
	}
	return w
}

func (w *workerResult) fail(err error) {
	w.errors++
	if w.firstErr == "" {
		w.firstErr = err.Error()
	}
}
