package proxy

import (
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
)

// vLLM and SGLang read "stream" as pydantic's lax mode reads a boolean:
// "true", 1 or "yes" stream as true does. The client did not ask for usage,
// so the gateway asks the engine for it (and removes the usage chunk before
// the client sees it): without it, the engine sent no count and OSL was
// estimated from the token events (usage_source estimate), ISL unknown.
func TestLaxStreamGetsItsUsage(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, st := range []string{`"true"`, `1`, `"yes"`, `"True"`} {
		body := `{"model":"m","stream":` + st + `,"messages":[{"role":"user","content":"hi"}]}`
		status, _, got, err := post(t, g.URL()+"/v1/chat/completions", body, nil)
		if err != nil || status != 200 {
			t.Fatalf("stream %s: status %d err %v", st, status, err)
		}
		if want := strings.Join(vllmEvents, "") + done; got != want {
			t.Fatalf("stream %s: client bytes differ from the engine's own answer without usage:\n got %q\nwant %q", st, got, want)
		}
		if !wantsUsage(up.lastBody()) {
			t.Errorf("stream %s: the gateway did not ask the engine for usage: %s", st, up.lastBody())
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeOK || rec.UsageSource != meter.UsageUpstream || rec.ISL != 9 || rec.OSL != 2 {
			t.Errorf("stream %s: outcome %v, usage_source %v, isl %d, osl %d; want the engine's counts, 9 and 2", st, rec.Outcome, rec.UsageSource, rec.ISL, rec.OSL)
		}
	}
}
