package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/sim"
)

// sdkDir holds the script that drives the official openai Node SDK, and
// the SDK once installed there (testdata/sdk/README.md).
const sdkDir = "../testdata/sdk"

// sdkAttempt is one request the SDK sent, as its fetch saw it.
type sdkAttempt struct {
	ID           string `json:"id"`
	Status       int    `json:"status"`
	ShouldRetry  string `json:"should_retry"`
	RetryAfterMs string `json:"retry_after_ms"`
	Error        string `json:"error"`
}

// sdkCase is what the script printed for one call.
type sdkCase struct {
	Case     string       `json:"case"`
	Attempts []sdkAttempt `json:"attempts"`
	Text     string       `json:"text"`
	Usage    *struct {
		Prompt     int `json:"prompt_tokens"`
		Completion int `json:"completion_tokens"`
	} `json:"usage"`
	Error  string `json:"error"`
	Status int    `json:"status"`
	Wait   string `json:"wait"`
}

// The official openai Node SDK, a real client that changes nothing, in
// front of the gateway in front of the simulator: every attempt it makes
// (its own retries included) is one record with the outcome the README
// gives, the usage it shows is the record's ISL and OSL, its text is the
// engine's, and it retries what the gateway says to retry and nothing
// else. Skipped without node or the SDK installed (npm install in
// testdata/sdk), except in CI.
func TestOpenAINodeSDK(t *testing.T) {
	node := testenv.Binary(t, "nodejs", "node")
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", "openai", "package.json")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI needs the openai SDK in %s (npm install there): %v", sdkDir, err)
		}
		t.Skipf("no openai SDK in %s (npm install --no-package-lock there)", sdkDir)
	}
	engine, simURL := startSim(t, sim.Config{})
	open, key := tenantWithKey(t, "acme", ratelimit.Limits{})
	one, oneKey := tenantWithKey(t, "one", ratelimit.Limits{MaxConcurrency: 1, TPM: 1000})
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, open, one)
	g := startGateway(t, Config{Upstream: simURL, Keys: store, Limits: gate})

	cmd := exec.Command(node, "openai.cjs")
	cmd.Dir = sdkDir
	cmd.Env = append(os.Environ(), "GOODPUT_BASE_URL="+g.URL()+"/v1", "GOODPUT_KEY="+key, "GOODPUT_ONE_KEY="+oneKey)
	cmd.SysProcAttr = testenv.ChildAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testenv.SyncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("node's stderr:\n%s", stderr.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cases := map[string]sdkCase{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var c sdkCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("%v: %s", err, sc.Bytes())
		}
		if c.Wait != "" {
			// The barrier: the script goes on once the engine has it.
			for {
				if _, ok := engine.Trace(c.Wait); ok {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("%s never reached the engine", c.Wait)
				case <-time.After(time.Millisecond):
				}
			}
			io.WriteString(stdin, "go\n")
			continue
		}
		cases[c.Case] = c
		t.Logf("%s", sc.Bytes())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("node: %v", err)
	}

	// One record per attempt.
	want := 0
	for _, c := range cases {
		want += len(c.Attempts)
	}
	recs := map[string]meter.Record{}
	for range want {
		rec := g.record(t)
		if _, dup := recs[rec.RequestID]; dup {
			t.Errorf("two records for %s", rec.RequestID)
		}
		recs[rec.RequestID] = rec
	}
	g.noMoreRecords(t)

	// expect checks a call's attempts against what the gateway answered,
	// their records and which of them reached the engine.
	expect := func(name string, outcomes []meter.Outcome, statuses []int, atEngine []bool) sdkCase {
		t.Helper()
		c, ok := cases[name]
		if !ok {
			t.Fatalf("%s: the script printed nothing", name)
		}
		if len(c.Attempts) != len(outcomes) {
			t.Fatalf("%s: %d attempts, want %d: %+v", name, len(c.Attempts), len(outcomes), c.Attempts)
		}
		for i, a := range c.Attempts {
			rec, ok := recs[a.ID]
			if !ok {
				t.Errorf("%s: no record for attempt %s", name, a.ID)
				continue
			}
			if rec.Outcome != outcomes[i] || rec.Status != statuses[i] {
				t.Errorf("%s: record %s says %s %d, want %s %d (%s)", name, a.ID, rec.Outcome, rec.Status, outcomes[i], statuses[i], rec.ErrorMessage)
			}
			if a.Status != 0 && a.Status != rec.Status {
				t.Errorf("%s: the SDK got %d, the record says %d", name, a.Status, rec.Status)
			}
			if _, seen := engine.Trace(a.ID); seen != atEngine[i] {
				t.Errorf("%s: attempt %s at the engine: %v, want %v", name, a.ID, seen, atEngine[i])
			}
		}
		return c
	}
	// usageIs checks the SDK's usage against the record of its last attempt.
	usageIs := func(c sdkCase) {
		t.Helper()
		rec := recs[c.Attempts[len(c.Attempts)-1].ID]
		if c.Usage == nil || c.Usage.Prompt != rec.ISL || c.Usage.Completion != rec.OSL || rec.UsageSource != meter.UsageUpstream {
			t.Errorf("%s: the SDK's usage %+v, the record's isl %d osl %d (%s)", c.Case, c.Usage, rec.ISL, rec.OSL, rec.UsageSource)
		}
	}
	ok, abort := meter.OutcomeOK, meter.OutcomeClientAbort

	c := expect("sdk-stream", []meter.Outcome{ok}, []int{200}, []bool{true})
	usageIs(c)
	if tr, _ := engine.Trace("sdk-stream-0"); c.Usage == nil || tr.CompletionTokens != c.Usage.Completion || len(strings.Fields(c.Text)) != tr.CompletionTokens {
		t.Errorf("sdk-stream: the SDK's text %q, the engine sent %d tokens", c.Text, tr.CompletionTokens)
	}
	c = expect("sdk-chat", []meter.Outcome{ok}, []int{200}, []bool{true})
	usageIs(c)
	if !strings.HasPrefix(cases["sdk-stream"].Text, c.Text) || c.Text == "" {
		// The simulator's words depend only on their position.
		t.Errorf("sdk-chat: text %q, not the start of the stream's %q", c.Text, cases["sdk-stream"].Text)
	}
	expect("sdk-abort", []meter.Outcome{abort}, []int{200}, []bool{true})
	if c := cases["sdk-abort-first"]; c.Error != "APIUserAbortError" {
		t.Errorf("sdk-abort-first: the SDK's error %q", c.Error)
	}
	expect("sdk-abort-first", []meter.Outcome{abort}, []int{499}, []bool{true})
	expect("sdk-hold", []meter.Outcome{abort}, []int{499}, []bool{true})
	c = expect("sdk-retry", []meter.Outcome{meter.OutcomeRateLimited, ok}, []int{429, 200}, []bool{false, true})
	usageIs(c)
	if a := c.Attempts[0]; a.RetryAfterMs == "" || a.ShouldRetry != "" {
		t.Errorf("sdk-retry: the 429 said retry-after-ms %q, X-Should-Retry %q", a.RetryAfterMs, a.ShouldRetry)
	}
	c = expect("sdk-large", []meter.Outcome{meter.OutcomeRateLimited}, []int{429}, []bool{false})
	if c.Error != "RateLimitError" || c.Attempts[0].ShouldRetry != "false" {
		t.Errorf("sdk-large: %+v", c)
	}
	c = expect("sdk-reset", []meter.Outcome{meter.OutcomeUpstreamError}, []int{502}, []bool{true})
	if c.Error != "InternalServerError" || c.Attempts[0].ShouldRetry != "false" {
		t.Errorf("sdk-reset: %+v", c)
	}
	if len(cases) != 8 {
		t.Errorf("%d cases, want 8", len(cases))
	}
}
