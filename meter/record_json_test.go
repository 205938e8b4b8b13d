package meter

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func fullRecord() Record {
	var r Record
	r.Reset()
	r.Start = time.Date(2025, 6, 1, 14, 3, 4, 123456789, time.FixedZone("CEST", 2*3600))
	r.RequestID = "req-1"
	r.UpstreamRequestID = "cmpl-9"
	r.ClientRequestID = "job-7"
	r.Tenant = "acme"
	r.KeyID = "k1"
	r.Model = "llama"
	r.Route = "chat"
	r.Stream = true
	r.Status = 200
	r.Outcome = OutcomeUpstreamError
	r.ErrorMessage = "error event: Token limit reached"
	r.ISL, r.OSL, r.UsageSource = 43, 10, UsageUpstream
	r.TTFT = 123456789 * time.Nanosecond
	r.TTFTContent = 200 * time.Millisecond
	r.E2E = 2 * time.Second
	r.TPOT = 208641 * time.Nanosecond
	r.ITL = []time.Duration{1500 * time.Microsecond, 400 * time.Nanosecond, 2000500 * time.Nanosecond, 0}
	r.MaxITL = 2000500 * time.Nanosecond
	r.Events = 5
	r.TokensPerEvent = []int{0, 1, 2, 1, 0}
	r.Overhead = 350 * time.Microsecond
	r.WriteDelay = 120 * time.Microsecond
	r.QueueWait = 12 * time.Millisecond
	r.Upstream = "http://vllm:8000"
	return r
}

func TestRecordAppendJSONGolden(t *testing.T) {
	r := fullRecord()
	got := string(r.AppendJSON([]byte("prefix ")))
	want := `prefix {"time":"2025-06-01T12:03:04.123456Z","request_id":"req-1","upstream_request_id":"cmpl-9","client_request_id":"job-7","tenant":"acme","key_id":"k1",` +
		`"model":"llama","route":"chat","stream":true,"status":200,"outcome":"upstream_error",` +
		`"error":"error event: Token limit reached","isl":43,"osl":10,"usage_source":"usage",` +
		`"ttft_ms":123.457,"ttft_content_ms":200.000,"e2e_ms":2000.000,"tpot_ms":0.209,` +
		`"itl_ms":[1.500,0.000,2.001,0.000],"max_itl_ms":2.001,"events":5,"tokens_per_event":[0,1,2,1,0],` +
		`"overhead_ms":0.350,"write_delay_ms":0.120,"queue_ms":12.000,"upstream":"http://vllm:8000"}` + "\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestRecordAppendJSONVerdict(t *testing.T) {
	r := fullRecord()
	m := decodeRecord(t, r.AppendJSON(nil))
	if _, ok := m["slo"]; ok {
		t.Fatalf("unjudged record has slo: %v", m)
	}
	r.SLO, r.Judged, r.Good, r.MissReasons = "interactive", true, false, []string{"ttft", "error"}
	m = decodeRecord(t, r.AppendJSON(nil))
	if m["slo"] != "interactive" || m["good"] != false {
		t.Fatalf("verdict %v", m)
	}
	if rs, ok := m["miss_reasons"].([]any); !ok || len(rs) != 2 || rs[0] != "ttft" || rs[1] != "error" {
		t.Fatalf("miss_reasons %v", m["miss_reasons"])
	}
	r.Good, r.MissReasons = true, nil
	m = decodeRecord(t, r.AppendJSON(nil))
	if rs, ok := m["miss_reasons"].([]any); m["good"] != true || !ok || len(rs) != 0 {
		t.Fatalf("good record: %v", m)
	}
}

func decodeRecord(t *testing.T, line []byte) map[string]any {
	t.Helper()
	if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
		t.Fatalf("not one JSON line: %q", line)
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("invalid JSON %s: %v", line, err)
	}
	return m
}

func TestRecordAppendJSONDecodes(t *testing.T) {
	r := fullRecord()
	m := decodeRecord(t, r.AppendJSON(nil))
	ts, err := time.Parse(time.RFC3339Nano, m["time"].(string))
	if err != nil || !ts.Equal(r.Start.Truncate(time.Microsecond)) || ts.Location() != time.UTC {
		t.Errorf("time %v (%v), want %v in UTC", m["time"], err, r.Start)
	}
	for key, want := range map[string]string{
		"isl": "43", "osl": "10", "ttft_ms": "123.457", "e2e_ms": "2000.000", "events": "5",
		"max_itl_ms": "2.001", "overhead_ms": "0.350", "queue_ms": "12.000", "status": "200",
	} {
		if n, ok := m[key].(json.Number); !ok || n.String() != want {
			t.Errorf("%s = %v, want %s", key, m[key], want)
		}
	}
	if itl, ok := m["itl_ms"].([]any); !ok || len(itl) != 4 {
		t.Errorf("itl_ms = %v", m["itl_ms"])
	}
	if m["stream"] != true || m["outcome"] != "upstream_error" || m["usage_source"] != "usage" || m["key_id"] != "k1" {
		t.Errorf("decoded %v", m)
	}
}

func TestRecordAppendJSONUnknown(t *testing.T) {
	var r Record
	r.Reset()
	r.RequestID = "r"
	r.Route = "other"
	m := decodeRecord(t, r.AppendJSON(nil))
	for _, key := range []string{"time", "isl", "osl", "ttft_ms", "ttft_content_ms", "e2e_ms", "tpot_ms", "itl_ms", "max_itl_ms", "events", "overhead_ms", "write_delay_ms"} {
		v, ok := m[key]
		if !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null", key, v, ok)
		}
	}
	for _, key := range []string{"upstream_request_id", "client_request_id", "key_id", "error", "tokens_per_event", "queue_ms"} {
		if v, ok := m[key]; ok {
			t.Errorf("%s = %v, want it omitted", key, v)
		}
	}
	for _, key := range []string{"request_id", "tenant", "model", "route", "stream", "status", "outcome", "usage_source", "upstream"} {
		if _, ok := m[key]; !ok {
			t.Errorf("%s missing", key)
		}
	}
	if m["usage_source"] != "none" || m["outcome"] != "ok" {
		t.Errorf("decoded %v", m)
	}

	// A stream with no token event: events 0 and an empty itl_ms, not null.
	r.Events = 0
	m = decodeRecord(t, r.AppendJSON(nil))
	if itl, ok := m["itl_ms"].([]any); !ok || len(itl) != 0 {
		t.Errorf("itl_ms = %#v, want []", m["itl_ms"])
	}
	if n, ok := m["events"].(json.Number); !ok || n.String() != "0" {
		t.Errorf("events = %v, want 0", m["events"])
	}
}

func TestRecordAppendJSONEscaping(t *testing.T) {
	var r Record
	r.Reset()
	nasty := "q\"b\\s/ n\n r\r t\t \x00\x01\x1f del\x7f é 日本 🎉 \u2028\u2029 bad\xff\xfeend"
	r.RequestID = nasty
	r.Tenant = "</script>"
	r.ErrorMessage = nasty
	line := r.AppendJSON(nil)
	m := decodeRecord(t, line)
	want := strings.Replace(nasty, "\xff\xfe", "\ufffd\ufffd", 1) // one U+FFFD per invalid byte
	if m["request_id"] != want || m["error"] != want {
		t.Errorf("request_id round trip:\n got %q\nwant %q", m["request_id"], want)
	}
	if m["tenant"] != "</script>" {
		t.Errorf("tenant %q", m["tenant"])
	}
	if bytes.ContainsAny(line[:len(line)-1], "\n\r\u2028\u2029") {
		t.Errorf("raw line breaks in %q", line)
	}
}

// DEL and the C1 control characters are escaped in the request log, as
// the C0 ones are: a model holding U+009B (CSI) or U+009D (OSC) and U+009C
// (ST) reached a terminal reading the log (tail -f, request_log "-") as the
// sequences it acts on: a screen cleared, an OSC 8 link. The line still
// decodes to the same strings.
func TestRecordAppendJSONTerminalControls(t *testing.T) {
	var r Record
	r.Reset()
	nasty := "m\u009b2J\u009d8;;http://evil.example\u009cCLICK\u009d8;;\u009c del\x7f \u0080\u009f \u00a0é"
	r.Model = nasty
	r.ErrorMessage = nasty
	line := r.AppendJSON(nil)
	m := decodeRecord(t, line)
	if m["model"] != nasty || m["error"] != nasty {
		t.Errorf("round trip: model %q, error %q, want %q", m["model"], m["error"], nasty)
	}
	for _, c := range []string{"\x7f", "\u0080", "\u009b", "\u009c", "\u009d", "\u009f"} {
		if bytes.Contains(line, []byte(c)) {
			t.Errorf("%q raw in %q", c, line)
		}
	}
	for _, want := range []string{`m\u009b2J\u009d8;;`, `del\u007f`, `\u0080\u009f`, "\u00a0é"} {
		if !bytes.Contains(line, []byte(want)) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
}

func TestRecordResetKeepsCapacity(t *testing.T) {
	r := fullRecord()
	itl, tpe := cap(r.ITL), cap(r.TokensPerEvent)
	r.Reset()
	if len(r.ITL) != 0 || cap(r.ITL) != itl || len(r.TokensPerEvent) != 0 || cap(r.TokensPerEvent) != tpe {
		t.Fatalf("ITL %d/%d, TokensPerEvent %d/%d", len(r.ITL), cap(r.ITL), len(r.TokensPerEvent), cap(r.TokensPerEvent))
	}
	if r.RequestID != "" || r.Stream || r.Status != 0 || r.TTFT != Unknown || r.QueueWait != Unknown || r.Overhead != Unknown || r.Events != Unknown || !r.Start.IsZero() {
		t.Fatalf("after Reset: %+v", r)
	}
}

func TestAppendMillisRounding(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0.000", 499: "0.000", 500: "0.001", 1499: "0.001", time.Millisecond: "1.000",
		-1: "null", -time.Second: "null", 90 * time.Minute: "5400000.000",
		time.Duration(1<<63 - 1): "9223372036854.776",
	} {
		if got := string(appendMillis(nil, d)); got != want {
			t.Errorf("appendMillis(%d) = %s, want %s", d, got, want)
		}
	}
}
