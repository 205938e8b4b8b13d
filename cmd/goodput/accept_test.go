package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/config"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scriptedEngine is an OpenAI-compatible engine whose every answer is
// fixed by the request, and which notes when it wrote each request's first
// token's write: the reference the gateway's TTFT is checked against. Like vLLM and
// llama.cpp it sends 200 and its headers at once, then prefills.
type scriptedEngine struct {
	srv *http.Server
	ln  net.Listener

	mu        sync.Mutex
	seen      map[string]int       // X-Request-Id -> times received (inference)
	firstTok  map[string]time.Time // X-Request-Id -> first token written
	probes    int                  // non-inference requests received
	prefillOf func(id string) time.Duration
}

// engineReply is what the engine answers to the request with this prompt:
// the prompt's word count is its ISL, and it generates osl tokens.
func engineReply(prompt string, maxTokens int) (isl, osl int) {
	return len(strings.Fields(prompt)), maxTokens
}

func startScriptedEngine(t *testing.T, prefillOf func(id string) time.Duration) *scriptedEngine {
	t.Helper()
	e := &scriptedEngine{seen: map[string]int{}, firstTok: map[string]time.Time{}, prefillOf: prefillOf}
	mux := http.NewServeMux()
	probe := func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.probes++
		e.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"m"}]}`)
	}
	mux.HandleFunc("GET /v1/models", probe)
	mux.HandleFunc("GET /health", probe)
	mux.HandleFunc("GET /metrics", probe)
	mux.HandleFunc("POST /v1/chat/completions", e.chat)
	var err error
	if e.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	e.srv = &http.Server{Handler: mux}
	go e.srv.Serve(e.ln)
	t.Cleanup(func() { e.srv.Close() })
	return e
}

func (e *scriptedEngine) chat(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Request-Id")
	var req struct {
		MaxTokens     int `json:"max_tokens"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request"}}`, 400)
		return
	}
	e.mu.Lock()
	e.seen[id]++
	e.mu.Unlock()
	isl, osl := engineReply(req.Messages[0].Content, req.MaxTokens)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	fl.Flush() // headers before prefill, as real engines do
	select {
	case <-time.After(e.prefillOf(id)):
	case <-r.Context().Done():
		return
	}
	chunk := func(delta string) bool {
		if _, err := fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":null}]}\n\n", delta); err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	// Stamped as the write starts: the gateway may read the bytes before
	// this goroutine runs again after the write.
	e.mu.Lock()
	e.firstTok[id] = time.Now()
	e.mu.Unlock()
	if !chunk(`{"role":"assistant","content":""}`) {
		return
	}
	for i := 0; i < osl; i++ {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		if !chunk(fmt.Sprintf(`{"content":"t%d "}`, i)) {
			return
		}
	}
	if req.StreamOptions.IncludeUsage {
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", isl, osl, isl+osl)
	}
	io.WriteString(w, "data: [DONE]\n\n")
	fl.Flush()
}

// Issue "trust every number", as done: a scripted engine that notes its own
// write times, one request in 12 abandoned by its client after the first
// token, health probes and model listings mixed in. No request reaches the
// engine twice, probes are not judged, SLO attainment equals the hand
// count, ISL and OSL are exact, and the gateway's TTFT is within 2 ms of
// the engine's own first write at p99 (the tight bound in CI's timing step;
// never earlier than the engine's write in any run).
func TestScriptedEngineNumbersAreExact(t *testing.T) {
	testenv.Bounded(t, func() error { return scriptedEngineNumbers(t) })
}

// scriptedEngineNumbers makes one run of TestScriptedEngineNumbersAreExact,
// with an engine and a gateway of its own, and returns an error when the
// p99 of the first-token lag is over 2 ms (a bound under testenv.Bounded).
func scriptedEngineNumbers(t *testing.T) error {
	const (
		// 220 streams are timed (n less the abandoned ones), so that the
		// p99 of the first-token lag is a p99, the third-highest lag, and
		// not the highest: over 44 streams one late wake-up on a shared
		// machine decided the bound.
		n          = 240
		slowEach   = 6  // every 6th request of the first slowBelow prefills past the TTFT bound
		slowBelow  = 48 // (the slow prefills take 1.2 s each: the test stays short)
		abortEvery = 12
	)
	slow := func(i int) bool { return i < slowBelow && i%slowEach == 0 }
	prefill := func(id string) time.Duration {
		var i int
		fmt.Sscanf(id, "req-%d", &i)
		// Far on either side of the 600 ms bound, so that a loaded machine
		// (the race detector, packages in parallel) cannot move a request
		// across it: the hand count depends only on the script.
		if slow(i) {
			return 1200 * time.Millisecond
		}
		return 10 * time.Millisecond
	}
	eng := startScriptedEngine(t, prefill)
	// The comparison below is of wall-clock times (the log's, the
	// engine's): a step of the wall clock during the run (NTP, a VM's
	// clock corrected) moves one against the other. How far the wall clock
	// moved against the monotonic one over the run is allowed for, and
	// said (CI once saw the gateway's first token 1.6 ms "before" the
	// engine's write, all other lags positive).
	clockStart := time.Now()
	dir := t.TempDir()
	logPath := filepath.Join(dir, "requests.jsonl")
	cfg, err := config.Parse(strings.NewReader(fmt.Sprintf(`
upstream: http://%s
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
request_log: %s
slos:
  interactive: {ttft: 600ms, tpot: 200ms, objective: 0.9}
default_slo: interactive
`, eng.ln.Addr(), logPath)))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := startServe(t, cfg)

	type want struct{ isl, osl int }
	wants := map[string]want{}
	good := 0
	for i := 0; i < n; i++ {
		if i%abortEvery != abortEvery-1 && !slow(i) {
			good++
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
			defer client.CloseIdleConnections()
			for i := range work {
				for _, p := range []string{"/v1/models", "/health", "/metrics"}[:i%4] {
					resp, err := client.Get("http://" + s.Proxy + p)
					if err != nil {
						t.Error(err)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				id := fmt.Sprintf("req-%d", i)
				prompt := strings.TrimSpace(strings.Repeat("word ", 10+i))
				isl, osl := engineReply(prompt, 3+i%5)
				mu.Lock()
				wants[id] = want{isl, osl}
				mu.Unlock()
				body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, osl, prompt)
				req, _ := http.NewRequest("POST", "http://"+s.Proxy+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("X-Request-Id", id)
				req.Header.Set("X-Tenant", "acme")
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					continue
				}
				if i%abortEvery == abortEvery-1 {
					// Leave after the first content token.
					br := bufio.NewReader(resp.Body)
					for {
						line, err := br.ReadString('\n')
						if err != nil || strings.Contains(line, `"content":"t0 "`) {
							break
						}
					}
					resp.Body.Close()
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || !strings.HasSuffix(string(b), "data: [DONE]\n\n") || strings.Contains(string(b), `"usage"`) {
					t.Errorf("%s: read err %v, body %q", id, err, b)
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()

	// Every record is in the log once the counters say so and the log's
	// flush has run.
	var lines []map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for {
		lines = readLog(t, logPath)
		inference := 0
		for _, l := range lines {
			if l["route"] == "chat" {
				inference++
			}
		}
		if inference >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	eng.mu.Lock()
	defer eng.mu.Unlock()
	for id, c := range eng.seen {
		if c != 1 {
			t.Errorf("%s reached the engine %d times", id, c)
		}
	}
	if len(eng.seen) != n {
		t.Errorf("the engine saw %d inference requests, want %d", len(eng.seen), n)
	}

	var lags []time.Duration
	now := time.Now()
	step := now.Round(0).Sub(clockStart.Round(0)) - now.Sub(clockStart) // wall minus monotonic
	if step < 0 {
		step = -step
	}
	if step > 10*time.Microsecond {
		t.Logf("the wall clock moved %v against the monotonic clock during the run", step)
	}
	records, probes, judgedGood, judged := 0, 0, 0, 0
	for _, l := range lines {
		id, _ := l["request_id"].(string)
		if l["route"] != "chat" {
			probes++
			if l["slo"] != nil || l["good"] != nil || l["ttft_ms"] != nil {
				t.Errorf("a probe was judged or timed: %v", l)
			}
			continue
		}
		records++
		w := wants[id]
		if l["good"] != nil {
			judged++
			if l["good"] == true {
				judgedGood++
			}
		}
		var i int
		fmt.Sscanf(id, "req-%d", &i)
		if i%abortEvery == abortEvery-1 {
			if l["outcome"] != "client_abort" {
				t.Errorf("%s: outcome %v, want client_abort", id, l["outcome"])
			}
			continue
		}
		if l["outcome"] != "ok" || int(l["isl"].(float64)) != w.isl || int(l["osl"].(float64)) != w.osl || l["usage_source"] != "usage" {
			t.Errorf("%s: record %v, want ok with isl %d osl %d from the engine", id, l, w.isl, w.osl)
			continue
		}
		start, err := time.Parse(time.RFC3339Nano, l["time"].(string))
		if err != nil {
			t.Fatal(err)
		}
		gwFirst := start.Add(time.Duration(l["ttft_ms"].(float64) * float64(time.Millisecond)))
		lag := gwFirst.Sub(eng.firstTok[id])
		// The log's time has microseconds: allow one for its rounding.
		if lag < -time.Microsecond-step {
			t.Errorf("%s: the gateway saw its first token %v before the engine wrote it", id, -lag)
		}
		lags = append(lags, lag)
	}
	if records != n {
		t.Fatalf("%d inference records, want %d", records, n)
	}
	if probes != eng.probes {
		t.Errorf("%d probe records, the engine answered %d probes", probes, eng.probes)
	}
	if judged != n || judgedGood != good {
		t.Errorf("judged %d (good %d), want %d judged and %d good by hand", judged, judgedGood, n, good)
	}

	// The counters, the source of attainment, agree with the hand count.
	resp, err := http.Get("http://" + s.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	byResult := map[string]float64{}
	for _, m := range fams["goodput_slo_requests_total"].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "result" {
				byResult[lp.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	if byResult["good"] != float64(good) || byResult["good"]+byResult["miss"] != n {
		t.Errorf("goodput_slo_requests_total %v, want good %d of %d", byResult, good, n)
	}

	if len(lags) == 0 {
		t.Fatal("no stream to time")
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	p50, p99 := lags[len(lags)/2], lags[(len(lags)*99+99)/100-1]
	t.Logf("gateway first token after the engine's first write: p50 %v, p99 %v, max %v over %d streams", p50, p99, lags[len(lags)-1], len(lags))
	if p99 > 2*time.Millisecond {
		return fmt.Errorf("first-token lag p99 %v over the 2 ms bound", p99)
	}
	return nil
}
