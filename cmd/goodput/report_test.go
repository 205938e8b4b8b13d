package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/config"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/report"
	"github.com/goodput/goodput/slo"
)

// reportClasses is the SLO configuration of the report tests: a request is
// good when its first token comes within 350ms (the simulator answers at
// once unless told otherwise: a wide margin for a loaded machine) and it
// ends within 5s.
func reportClasses() slo.Config {
	return slo.Config{SLOs: map[string]*slo.Class{
		"interactive": {TTFT: cfgtypes.Duration(350 * time.Millisecond), E2E: cfgtypes.Duration(5 * time.Second), Objective: 0.95},
	}}
}

// scripted is one kind of request sent through the gateway.
type scripted struct {
	tenant, key string
	ttft        string // X-Sim-TTFT
	fault       string // X-Sim-Fault
}

var (
	goodReq  = scripted{ttft: "0s"}
	slowReq  = scripted{ttft: "600ms"}       // a ttft miss, mid-bucket: (500ms, 750ms]
	errorReq = scripted{fault: "status=503"} // an error miss
)

const reportMaxTokens = 5

// sendScripted sends n copies of each request to the gateway at proxy,
// concurrently, and checks every answer's status.
func sendScripted(t *testing.T, proxy string, reqs map[scripted]int) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	body := fmt.Sprintf(`{"model":"sim-llama","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"hello there"}]}`, reportMaxTokens)
	var wg sync.WaitGroup
	for r, n := range reqs {
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest(http.MethodPost, "http://"+proxy+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if r.tenant != "" {
					req.Header.Set("X-Tenant", r.tenant)
				}
				if r.key != "" {
					req.Header.Set("Authorization", "Bearer "+r.key)
				}
				req.Header.Set("X-Sim-ITL", "1ms")
				if r.ttft != "" {
					req.Header.Set("X-Sim-TTFT", r.ttft)
				}
				if r.fault != "" {
					req.Header.Set("X-Sim-Fault", r.fault)
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				want := http.StatusOK
				if r.fault != "" {
					want = http.StatusServiceUnavailable
				}
				if resp.StatusCode != want {
					t.Errorf("request %+v: status %d, want %d", r, resp.StatusCode, want)
				}
			}()
		}
	}
	wg.Wait()
}

func with(r scripted, tenant, key string) scripted {
	r.tenant, r.key = tenant, key
	return r
}

// runReport runs `goodput report` and returns its standard output.
func runReport(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(append([]string{"report"}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("goodput report %v: exit %d, stderr %q", args, code, stderr.String())
	}
	return stdout.String()
}

func decodeReport(t *testing.T, s string) *report.Report {
	t.Helper()
	var r report.Report
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, s)
	}
	if r.Format != report.Format || r.Version != report.Version {
		t.Fatalf("report JSON of format %q version %d, want %q version %d", r.Format, r.Version, report.Format, report.Version)
	}
	return &r
}

func wantNum(t *testing.T, name string, got report.Num, want float64) {
	t.Helper()
	if float64(got) != want {
		t.Errorf("%s = %v, want exactly %v", name, float64(got), want)
	}
}

func wantNear(t *testing.T, name string, got report.Num, want float64) {
	t.Helper()
	if math.Abs(float64(got)-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %v", name, float64(got), want)
	}
}

func reasonCount(r *report.Report, reason string) float64 {
	for _, rc := range r.SLO.MissReasons {
		if rc.Reason == reason {
			return float64(rc.Count)
		}
	}
	return math.NaN()
}

// checkWellFormed parses an HTML report as XML: every element closed,
// attributes quoted, text escaped.
func checkWellFormed(t *testing.T, page string) {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(page))
	dec.Strict = true
	elems := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("HTML report is not well-formed: %v", err)
		}
		if _, ok := tok.(xml.StartElement); ok {
			elems++
		}
	}
	if elems < 50 {
		t.Fatalf("HTML report has only %d elements", elems)
	}
}

// The report against one real gateway's admin API: scripted good and bad
// requests through the gateway in front of the simulator, then the report's
// numbers must be exactly those of the script.
func TestReportFromAdminAPI(t *testing.T) {
	cfg := &config.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", SLO: reportClasses(), DefaultSLO: "interactive"}
	s, _ := startServe(t, cfg)
	sendScripted(t, s.Proxy, map[scripted]int{
		with(goodReq, "acme", ""):    6,
		with(slowReq, "acme", ""):    2,
		with(errorReq, "acme", ""):   1,
		with(goodReq, "globex", ""):  3, // another tenant: not in acme's report
		with(errorReq, "globex", ""): 1,
	})
	// Records are judged when each response ends; wait until all are in.
	deadline := time.Now().Add(5 * time.Second)
	for scrapeSum(t, "http://"+s.Admin+"/metrics", "goodput_slo_requests_total") < 13 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}

	out := runReport(t, "--tenant", "acme", "--from", "-5m", "--admin", "http://"+s.Admin, "--format", "json")
	r := decodeReport(t, out)
	if r.Source.Kind != report.SourceAdmin || r.Source.Window != "5m" {
		t.Errorf("source %+v, want the admin API's 5m window", r.Source)
	}
	wantNum(t, "requests", r.SLO.Requests, 9)
	wantNum(t, "good", r.SLO.Good, 6)
	wantNum(t, "misses", r.SLO.Misses, 3)
	wantNum(t, "attainment", r.SLO.Attainment, 6.0/9.0)
	wantNum(t, "ttft misses", report.Num(reasonCount(r, "ttft")), 2)
	wantNum(t, "error misses", report.Num(reasonCount(r, "error")), 1)
	wantNum(t, "e2e misses", report.Num(reasonCount(r, "e2e")), 0)
	wantNear(t, "objective", r.SLO.Objective, 0.95)
	wantNear(t, "allowed misses", r.SLO.AllowedMisses, 9*0.05)
	wantNear(t, "error budget used", r.SLO.ErrorBudgetUsed, 3/(9*0.05))
	wantNear(t, "error budget remaining", r.SLO.ErrorBudgetRemaining, 1-3/(9*0.05))
	if r.SLO.Met == nil || *r.SLO.Met {
		t.Errorf("met = %v, want false", r.SLO.Met)
	}
	if len(r.SLO.Classes) != 1 || r.SLO.Classes[0].Name != "interactive" {
		t.Errorf("classes %+v", r.SLO.Classes)
	}
	wantNum(t, "good output tokens", r.Goodput.GoodOutputTokens, 6*reportMaxTokens)
	wantNum(t, "output tokens", r.Throughput.OutputTokens, 8*reportMaxTokens)
	wantNear(t, "good requests/s", r.Goodput.GoodRequestsPerSecond, 6/r.Period.Seconds)
	if len(r.Models) != 1 || r.Models[0].Model != "sim-llama" || r.Models[0].Requests != 9 || r.Models[0].Good != 6 {
		t.Errorf("models %+v", r.Models)
	}
	// Latency: the sketch holds the 8 ok requests; 2 of them took 600ms.
	wantNum(t, "ttft count", r.Latency.TTFT.Count, 8)
	if p50, mx := float64(r.Latency.TTFT.P50), float64(r.Latency.TTFT.Max); !(p50 < 0.35 && mx >= 0.6) {
		t.Errorf("TTFT p50 %v max %v: want p50 < 350ms and max ≥ 600ms", p50, mx)
	}
	// Traffic: 9 arrivals, the 8 ok requests measured, all chat.
	wantNum(t, "arrivals", r.Traffic.Arrivals, 9)
	wantNum(t, "ISL count", r.Traffic.ISL.Count, 8)
	wantNum(t, "OSL p50", r.Traffic.OSL.P50, reportMaxTokens)
	wantNum(t, "chat requests", r.Traffic.Shapes.Counts["chat"], 8)
	wantNum(t, "unmeasured requests", r.Traffic.Shapes.Counts["unknown"], 1)
	if r.Traffic.Shapes.Traffic != "chat" {
		t.Errorf("traffic shape %q, want chat", r.Traffic.Shapes.Traffic)
	}
	if r.Hours != nil || r.WorstHours != nil {
		t.Errorf("the admin API has no hours, got %v / %v", r.Hours, r.WorstHours)
	}
	if !strings.Contains(strings.Join(r.Notes, " "), "cannot report an arbitrary past period") {
		t.Errorf("notes do not state the live view's limitation: %q", r.Notes)
	}

	// A tenant with no request (a misspelt name): a report all the same,
	// with a warning; none for a tenant with requests.
	var stdout, stderr bytes.Buffer
	if code := run([]string{"report", "--tenant", "acme-typo", "--from", "-5m", "--admin", s.Admin}, &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), `no judged request of tenant "acme-typo"`) {
		t.Errorf("unknown tenant: exit %d, stderr %q", code, stderr.String())
	}
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"report", "--tenant", "acme", "--from", "-5m", "--admin", s.Admin}, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
		t.Errorf("known tenant: exit %d, stderr %q", code, stderr.String())
	}
	md := runReport(t, "--tenant", "acme", "--from", "-5m", "--to", "now", "--admin", s.Admin)
	for _, want := range []string{
		"# SLO report: acme",
		"| Attainment | 66.67% (6 good of 9 requests) |",
		"| Objective | 95.00% |",
		"| Error budget used | 666.67% (3 misses) |",
		"| Error budget remaining | -566.67% |",
		"| ttft | 2 | 66.67% |",
		"| error | 1 | 33.33% |",
		"rolling 5m window",
		"unknown: the source has no per-hour numbers.",
		"| chat | 8 | 100.00% |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown report lacks %q:\n%s", want, md)
		}
	}

	htmlPath := filepath.Join(t.TempDir(), "acme.html")
	if out := runReport(t, "--tenant", "acme", "--from", "-1h", "--admin", "http://"+s.Admin+"/", "--out", htmlPath); out != "" {
		t.Errorf("with --out, stdout should be empty, got %q", out)
	}
	page, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	checkWellFormed(t, string(page))
	for _, want := range []string{"<td>Attainment</td><td>66.67% (6 good of 9 requests)</td>", "rolling 1h window", "<svg", "Attainment against the objective"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("HTML report lacks %q", want)
		}
	}
	for _, bad := range []string{"<script", "http://cdn", "https://"} {
		if strings.Contains(string(page), bad) {
			t.Errorf("HTML report contains %q: it must be self-contained", bad)
		}
	}
}

// TestReportWithoutSLOClasses: a tenant with requests on a gateway that
// judges none (no slos:) gets a report all the same, and the warning says
// that no class applies, not that its name may be wrong.
func TestReportWithoutSLOClasses(t *testing.T) {
	s, logs := startServe(t, &config.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0"})
	if !strings.Contains(logs.String(), "no SLO classes (slos: in the configuration)") {
		t.Errorf("serve did not say that nothing is judged:\n%s", logs.String())
	}
	sendScripted(t, s.Proxy, map[scripted]int{with(goodReq, "acme", ""): 3})
	deadline := time.Now().Add(5 * time.Second)
	for scrapeSum(t, "http://"+s.Admin+"/metrics", "goodput_requests_total") < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"report", "--tenant", "acme", "--from", "-5m", "--admin", s.Admin}, &stdout, &stderr)
	if code != 0 || !strings.Contains(stderr.String(), `tenant "acme" had 3 requests in the period and none was judged: no SLO class applies`) || strings.Contains(stderr.String(), "check the name") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

func TestReportFlagErrors(t *testing.T) {
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--admin", "http://x"}, 2, "--tenant is required"},
		{[]string{"--tenant", "acme"}, 2, "exactly one source"},
		{[]string{"--tenant", "acme", "--admin", "http://a", "--prometheus", "http://b"}, 2, "exactly one source"},
		{[]string{"--tenant", "acme", "--admin", "http://a", "--from", "yesterday"}, 2, `--from: "yesterday" is not a time`},
		{[]string{"--tenant", "acme", "--admin", "http://a", "--to", "-5x"}, 2, "--to:"},
		{[]string{"--tenant", "acme", "--admin", "http://a", "--from", "-1h", "--to", "-2h"}, 2, "must be before --to"},
		{[]string{"--tenant", "acme", "--admin", "http://a", "--format", "pdf"}, 2, `--format "pdf"`},
		// Not Markdown in a file named .pdf (found by a new-user probe).
		{[]string{"--tenant", "acme", "--admin", "http://a", "--out", "r.pdf"}, 2, "no report format has the extension .pdf"},
		{[]string{"--tenant", "acme", "--prometheus", "ftp://a"}, 2, "--prometheus:"},
		{[]string{"--tenant", "acme", "--admin", "http://a", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--tenant", "acme", "--admin", "http://a", "--worst", "0"}, 2, "--worst"},
		{[]string{"--tenant", "acme", "--admin", "http://" + dead}, 1, "cannot reach the gateway's admin API"},
		{[]string{"--tenant", "acme", "--prometheus", "http://" + dead}, 1, "cannot reach Prometheus"},
		{[]string{"--tenant", "acme", "--admin", "http://" + dead, "--from", "-30d", "--to", "-2d"}, 1, "use --prometheus for older periods"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"report"}, c.args...), &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("report %v: exit %d, stderr %q; want exit %d and an error naming %q", c.args, code, stderr.String(), c.code, c.want)
		}
		if stdout.Len() != 0 {
			t.Errorf("report %v: wrote %q to stdout on error", c.args, stdout.String())
		}
	}
}

// promAPI runs an instant query against Prometheus and returns the sum of
// the result's values (NaN when empty).
func promAPI(base, query string) (float64, error) {
	resp, err := http.PostForm(base+"/api/v1/query", url.Values{"query": {query}})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var pr struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value []any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&pr); err != nil {
		return 0, err
	}
	if pr.Status != "success" {
		return 0, fmt.Errorf("query %q: %s", query, pr.Error)
	}
	if len(pr.Data.Result) == 0 {
		return math.NaN(), nil
	}
	sum := 0.0
	for _, r := range pr.Data.Result {
		v, _ := strconv.ParseFloat(r.Value[1].(string), 64)
		sum += v
	}
	return sum, nil
}

// startPrometheus runs a real Prometheus scraping targets every second, until
// the test ends. Outside CI it skips the test when Prometheus is not
// installed; in CI that is a failure.
func startPrometheus(t *testing.T, targets ...string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("prometheus is not installed (%v): CI must install it (Debian package prometheus, see .ci/run)", err)
		}
		t.Skipf("prometheus is not installed (%v); CI installs it", err)
	}
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: goodput
    static_configs:
      - targets: [%s]
`, strings.Join(quoted, ", "))
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs syncBuffer
	cmd := exec.Command(bin, "--config.file="+confPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting prometheus: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	base := "http://" + addr
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("prometheus exited: %v\n%s", err, logs.b.String())
		default:
		}
		resp, err := client.Get(base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 20s\n%s", logs.b.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The report against a real Prometheus that scraped two gateway replicas:
// each replica got a different, known mix of requests, and the report must
// show their sums.
func TestReportFromPrometheusTwoReplicas(t *testing.T) {
	keyA, hashA, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	keyG, hashG, _ := identity.NewKey()
	tenants := []ratelimit.TenantConfig{
		{Name: "acme", SLO: "interactive", Keys: []ratelimit.KeyConfig{{ID: "acme-1", SHA256: hashA}}},
		{Name: "globex", SLO: "interactive", Keys: []ratelimit.KeyConfig{{ID: "globex-1", SHA256: hashG}}},
	}
	replica := func() serving {
		cfg := &config.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", SLO: reportClasses(), Tenants: tenants}
		s, _ := startServe(t, cfg)
		return s
	}
	a, b := replica(), replica()
	prom := startPrometheus(t, a.Admin, b.Admin)

	sendScripted(t, a.Proxy, map[scripted]int{
		with(goodReq, "", keyA):  5,
		with(slowReq, "", keyA):  2,
		with(errorReq, "", keyA): 1,
	})
	sendScripted(t, b.Proxy, map[scripted]int{
		with(goodReq, "", keyA):  3,
		with(slowReq, "", keyA):  1,
		with(goodReq, "", keyG):  4, // another tenant: not in acme's report
		with(errorReq, "", keyG): 2,
	})
	const total, good = 12, 8

	// Wait until Prometheus has scraped the final values of both replicas.
	deadline := time.Now().Add(15 * time.Second)
	for {
		slo, err1 := promAPI(prom, `sum(goodput_slo_requests_total{tenant="acme"})`)
		all, err2 := promAPI(prom, `sum(goodput_requests_total{tenant="acme"})`)
		targets, err3 := promAPI(prom, `count(goodput_slo_requests_total{tenant="acme",result="good"})`)
		if err1 == nil && err2 == nil && err3 == nil && slo == total && all == total && targets == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus did not scrape the final counts: slo %v (%v), requests %v (%v), replicas %v (%v); want %d, %d, 2", slo, err1, all, err2, targets, err3, total, total)
		}
		time.Sleep(200 * time.Millisecond)
	}

	out := runReport(t, "--tenant", "acme", "--from", "-5m", "--to", "now", "--prometheus", prom, "--format", "json")
	r := decodeReport(t, out)
	if r.Source.Kind != report.SourcePrometheus {
		t.Errorf("source %+v", r.Source)
	}
	wantNum(t, "requests", r.SLO.Requests, total)
	wantNum(t, "good", r.SLO.Good, good)
	wantNum(t, "misses", r.SLO.Misses, total-good)
	wantNum(t, "attainment", r.SLO.Attainment, float64(good)/total)
	wantNum(t, "ttft misses", report.Num(reasonCount(r, "ttft")), 3)
	wantNum(t, "error misses", report.Num(reasonCount(r, "error")), 1)
	wantNum(t, "e2e misses", report.Num(reasonCount(r, "e2e")), 0)
	if len(r.SLO.Classes) != 1 || r.SLO.Classes[0].Name != "interactive" || r.SLO.Classes[0].Requests != total {
		t.Errorf("classes %+v", r.SLO.Classes)
	} else {
		wantNum(t, "class objective", r.SLO.Classes[0].Objective, 0.95)
	}
	wantNear(t, "objective", r.SLO.Objective, 0.95)
	wantNear(t, "allowed misses", r.SLO.AllowedMisses, total*(1-0.95))
	wantNear(t, "error budget used", r.SLO.ErrorBudgetUsed, (total-good)/(total*(1-0.95)))
	wantNum(t, "good output tokens", r.Goodput.GoodOutputTokens, good*reportMaxTokens)
	wantNum(t, "output tokens", r.Throughput.OutputTokens, 11*reportMaxTokens)
	wantNum(t, "arrivals", r.Traffic.Arrivals, total)
	if len(r.Models) != 1 || r.Models[0].Requests != total || r.Models[0].Good != good {
		t.Errorf("models %+v", r.Models)
	}
	// Histograms: 11 requests streamed tokens; 3 of them waited 600ms.
	wantNum(t, "ttft count", r.Latency.TTFT.Count, 11)
	if p50, p99 := float64(r.Latency.TTFT.P50), float64(r.Latency.TTFT.P99); !(p50 < 0.35 && p99 > 0.5 && p99 <= 0.75) {
		t.Errorf("TTFT p50 %v p99 %v: want p50 < 350ms and p99 in the (500ms, 750ms] bucket", p50, p99)
	}
	if osl := float64(r.Traffic.OSL.P50); !(osl > 1 && osl <= 8) {
		t.Errorf("OSL p50 %v, want it in the (1, 8] bucket", osl)
	}
	if r.Traffic.Shapes.Traffic != "unknown" || report.Known(r.Traffic.InterArrival.GammaShape) {
		t.Errorf("Prometheus cannot know the shape mix or burstiness: %+v", r.Traffic)
	}
	// Hours: the period's clock hours add up to the totals.
	hourReq, hourGood := 0.0, 0.0
	for _, h := range r.Hours {
		hourReq += float64(h.Requests)
		hourGood += float64(h.Good)
	}
	if hourReq != total || hourGood != good {
		t.Errorf("hours add up to %v requests, %v good; want %d, %d: %+v", hourReq, hourGood, total, good, r.Hours)
	}
	if len(r.WorstHours) == 0 || len(r.WorstHours[0].Reasons) == 0 || r.WorstHours[0].Reasons[0].Reason != "ttft" {
		t.Errorf("worst hours %+v: want the hour with the misses, ttft first", r.WorstHours)
	}

	md := runReport(t, "--tenant", "acme", "--from", "-5m", "--prometheus", prom)
	for _, want := range []string{
		"| Attainment | 66.67% (8 good of 12 requests) |",
		"| ttft | 3 | 75.00% |",
		`histogram\_quantile`,                                   // escaped for Markdown: renders as histogram_quantile
		"Prometheus " + strings.Replace(prom, "://", `\://`, 1), // escaped for Markdown: no autolink
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown report lacks %q:\n%s", want, md)
		}
	}
	page := runReport(t, "--tenant", "acme", "--from", "-5m", "--prometheus", prom, "--format", "html")
	checkWellFormed(t, page)
	if !strings.Contains(page, "Attainment per hour (UTC)") || !strings.Contains(page, "66.67% (8 good of 12 requests)") {
		t.Errorf("HTML report lacks the hourly chart or the attainment")
	}
}
