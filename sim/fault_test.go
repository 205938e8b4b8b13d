package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

const streamReq = `{` + chatMsgs + `,"max_tokens":10,"stream":true}`

func TestFaultStatus(t *testing.T) {
	h := start(t, Config{})
	for _, c := range []struct {
		code int
		typ  string
	}{{503, "ServiceUnavailableError"}, {429, "TooManyRequestsError"}, {500, "InternalServerError"}, {400, "BadRequestError"}} {
		id := "st-" + strings.ToLower(c.typ)
		status, body, resp := h.post("/v1/chat/completions", streamReq, "X-Sim-Fault", "status="+itoa(c.code), "X-Request-Id", id)
		var e struct {
			Error struct {
				Message, Type string
				Code          int
			}
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			t.Fatalf("status=%d: body is not JSON: %v: %s", c.code, err, body)
		}
		if status != c.code || e.Error.Code != c.code || e.Error.Type != c.typ || !strings.Contains(e.Error.Message, "injected") ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("status=%d: got %d %+v", c.code, status, e)
		}
		if tr := h.waitTrace(id); tr.Status != c.code || tr.Fault != "status="+itoa(c.code) {
			t.Errorf("trace status %d fault %q", tr.Status, tr.Fault)
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestFaultHeaderErrors(t *testing.T) {
	h := start(t, Config{})
	for _, f := range []string{"status=200", "status=abc", "reset-after=-1", "explode=1", "reset-after=1,stall-after=2",
		"malformed-at=0", "error-at=0", "reset-after", "status=503,status=500", "malformed-at=1,malformed-at=2", "error-at=1,error-at=2"} {
		status, body, _ := h.post("/v1/chat/completions", streamReq, "X-Sim-Fault", f)
		if status != 400 || !strings.Contains(body, "X-Sim-Fault") {
			t.Errorf("X-Sim-Fault %q: %d %s", f, status, body)
		}
	}
	for _, hd := range []string{"X-Sim-TTFT", "X-Sim-ITL"} {
		for _, v := range []string{"fast", "-1ms"} {
			status, body, _ := h.post("/v1/chat/completions", streamReq, hd, v)
			if status != 400 || !strings.Contains(body, hd) {
				t.Errorf("%s: %q: %d %s", hd, v, status, body)
			}
		}
	}
}

// readBroken reads a body that must end in a transport error; it returns
// what arrived before.
func readBroken(t *testing.T, h *harness, fault string, id string) (string, Trace, error) {
	t.Helper()
	resp := h.do("POST", "/v1/chat/completions", streamReq, "X-Sim-Fault", fault, "X-Request-Id", id, "X-Sim-ITL", "1ms")
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: status %d", fault, resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("%s: body ended cleanly, want a broken connection; got %q", fault, b)
	}
	if !isNetErr(err) {
		t.Errorf("%s: unexpected error kind: %v", fault, err)
	}
	return string(b), h.waitTrace(id), err
}

func TestFaultResetAndClose(t *testing.T) {
	h := start(t, Config{})
	for _, c := range []struct {
		fault  string
		events int
		ending Ending
	}{
		{"reset-after=2", 3, EndReset},
		{"close-after=2", 3, EndClosed},
		{"reset-after=0", 0, EndReset},
		{"close-after=10", 11, EndClosed}, // after the last token, before the finish chunk
	} {
		body, tr, err := readBroken(t, h, c.fault, "f-"+c.fault)
		// The client sees an RST as "connection reset", a FIN mid-body as
		// an unexpected EOF.
		if reset := c.ending == EndReset; reset != strings.Contains(err.Error(), "reset") || reset == errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: client error %v", c.fault, err)
		}
		got := events(t, body)
		if len(got) != c.events {
			t.Fatalf("%s: %d events before the break, want %d: %q", c.fault, len(got), c.events, body)
		}
		for _, ev := range got {
			dataJSON(t, ev)
		}
		if strings.Contains(body, "[DONE]") || strings.Contains(body, "finish_reason\":\"") {
			t.Errorf("%s: stream finished: %q", c.fault, body)
		}
		if tr.Ending != c.ending || len(tr.Events) != c.events || !tr.DisconnectedAt.IsZero() {
			t.Errorf("%s: trace ending %v with %d events, disconnected %v", c.fault, tr.Ending, len(tr.Events), tr.DisconnectedAt)
		}
		if c.events > 0 && tr.Events[0].Kind != EventRole {
			t.Errorf("%s: first event %v", c.fault, tr.Events[0].Kind)
		}
	}
}

func TestFaultStallUntilClientLeaves(t *testing.T) {
	h := start(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := h.doCtx(ctx, "POST", "/v1/chat/completions", streamReq, "X-Sim-Fault", "stall-after=2", "X-Request-Id", "stall", "X-Sim-ITL", "1ms")
	defer resp.Body.Close()
	got := readEvents(t, bufio.NewReader(resp.Body), 3)
	if !strings.Contains(got[0], `"role":"assistant"`) || !strings.Contains(got[2], TokenText(0, 2)) {
		t.Fatalf("events before the stall: %q", got)
	}
	// Nothing more arrives while the client waits.
	time.Sleep(150 * time.Millisecond)
	tr, ok := h.s.Trace("stall")
	if !ok || tr.Done || len(tr.Events) != 3 {
		t.Fatalf("during the stall: ok=%v done=%v events=%d", ok, tr.Done, len(tr.Events))
	}
	left := time.Now()
	cancel()
	tr = h.waitTrace("stall")
	if tr.Ending != EndClientGone || tr.DisconnectedAt.IsZero() {
		t.Fatalf("ending %v, disconnected %v", tr.Ending, tr.DisconnectedAt)
	}
	// Noticed by the 50 ms poll, not at some later write: allow a generous 1 s.
	if d := tr.DisconnectedAt.Sub(left); d < 0 || d > time.Second {
		t.Errorf("disconnect noticed %v after the client left", d)
	}
	if len(tr.Events) != 3 {
		t.Errorf("%d events, want 3", len(tr.Events))
	}
}

func TestFaultStallTimeout(t *testing.T) {
	h := start(t, Config{MaxStall: 100 * time.Millisecond})
	body, tr, _ := readBroken(t, h, "stall-after=1", "stall-max")
	if n := len(events(t, body)); n != 2 {
		t.Errorf("%d events before the stall, want 2", n)
	}
	if tr.Ending != EndStallTimeout {
		t.Errorf("ending %v", tr.Ending)
	}
	if d := tr.End.Sub(tr.Events[len(tr.Events)-1].At); d < 100*time.Millisecond {
		t.Errorf("stall lasted %v, want at least MaxStall", d)
	}
}

func TestFaultMalformed(t *testing.T) {
	h := start(t, Config{})
	status, body, _ := h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`,
		"X-Sim-Fault", "malformed-at=2", "X-Request-Id", "mal")
	if status != 200 {
		t.Fatal(status)
	}
	evs := events(t, body)
	if len(evs) != 7 { // role, t1, broken t2, t3, finish, usage, [DONE]
		t.Fatalf("%d events: %q", len(evs), body)
	}
	for i, ev := range evs[:len(evs)-1] {
		js := strings.TrimPrefix(ev, "data: ")
		if valid := json.Valid([]byte(js)); valid == (i == 2) {
			t.Errorf("event %d valid=%v: %q", i, valid, ev)
		}
		if !strings.HasPrefix(ev, "data: {") {
			t.Errorf("event %d does not look like a data event: %q", i, ev)
		}
	}
	if u := dataJSON(t, evs[5])["usage"].(map[string]any); u["completion_tokens"] != 3.0 {
		t.Errorf("usage %v", u)
	}
	tr := h.waitTrace("mal")
	want := []EventKind{EventRole, EventToken, EventMalformed, EventToken, EventFinish, EventUsage, EventDone}
	if got := traceKinds(tr); !slices.Equal(got, want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
	if n := len(tr.TokenEvents()); n != 4 {
		t.Errorf("%d token events, want 4 (the malformed one is not)", n)
	}
}

func TestFaultErrorEvent(t *testing.T) {
	h := start(t, Config{})
	const errEv = `data: {"error": {"message": "sim: injected error at token %d", "type": "InternalServerError", "param": null, "code": 500}}`
	for _, c := range []struct {
		at    int
		kinds []EventKind
	}{
		{2, []EventKind{EventRole, EventToken, EventError, EventDone}},
		{1, []EventKind{EventError, EventDone}},
		{99, []EventKind{EventRole, EventToken, EventToken, EventToken, EventFinish, EventUsage, EventDone}}, // beyond the end: never fires
	} {
		id := "err-" + itoa(c.at)
		status, body, _ := h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`,
			"X-Sim-Fault", "error-at="+itoa(c.at), "X-Request-Id", id)
		if status != 200 {
			t.Fatal(status)
		}
		evs := events(t, body)
		if len(evs) != len(c.kinds) {
			t.Fatalf("error-at=%d: %d events: %q", c.at, len(evs), body)
		}
		if c.at <= 3 {
			if want := strings.Replace(errEv, "%d", itoa(c.at), 1); evs[len(evs)-2] != want {
				t.Errorf("error event\n got %q\nwant %q", evs[len(evs)-2], want)
			}
		}
		if evs[len(evs)-1] != "data: [DONE]" {
			t.Errorf("last event %q", evs[len(evs)-1])
		}
		if got := traceKinds(h.waitTrace(id)); !slices.Equal(got, c.kinds) {
			t.Errorf("error-at=%d: kinds %v, want %v", c.at, got, c.kinds)
		}
	}
}

func TestFaultsNonStreaming(t *testing.T) {
	h := start(t, Config{MaxStall: 50 * time.Millisecond})
	req := `{` + chatMsgs + `,"max_tokens":3}`

	status, body, _ := h.post("/v1/chat/completions", req, "X-Sim-Fault", "error-at=2")
	if status != 500 || !strings.Contains(body, `"type":"InternalServerError"`) || !json.Valid([]byte(body)) {
		t.Errorf("error-at: %d %s", status, body)
	}
	status, body, resp := h.post("/v1/chat/completions", req, "X-Sim-Fault", "malformed-at=1")
	if status != 200 || json.Valid([]byte(body)) || !strings.HasPrefix(body, `{"id":"chatcmpl-`) || resp.ContentLength != int64(len(body)) {
		t.Errorf("malformed-at: %d (len %d) %s", status, resp.ContentLength, body)
	}
	// Connection faults fire when the body is due (TTFT + 2·ITL here).
	for _, c := range []struct {
		fault  string
		ending Ending
	}{{"reset-after=5", EndReset}, {"close-after=0", EndClosed}, {"stall-after=1", EndStallTimeout}} {
		req, _ := newReq(h, req, "X-Sim-Fault", c.fault, "X-Request-Id", "ns-"+c.fault, "X-Sim-TTFT", "30ms", "X-Sim-ITL", "1ms")
		resp, err := h.client.Do(req)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err == nil {
			t.Errorf("%s: got a complete response", c.fault)
		}
		tr := h.waitTrace("ns-" + c.fault)
		if tr.Ending != c.ending || len(tr.Events) != 0 {
			t.Errorf("%s: ending %v, %d events", c.fault, tr.Ending, len(tr.Events))
		}
		if d := tr.End.Sub(tr.Start); d < 32*time.Millisecond {
			t.Errorf("%s: fired %v after the start, before the body was due", c.fault, d)
		}
	}
}
