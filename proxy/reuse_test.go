package proxy

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/sim"
)

// fixturesDir holds the recorded engine streams the meter tests use (see
// meter/helpers_test.go), relative to this package.
const fixturesDir = "../testdata/streams"

// recordedFixture is one recorded response body and how to serve it.
type recordedFixture struct {
	name        string
	api         meter.API // the route it answers (chat for the error bodies)
	status      int       // 200 for streams; the error status of a JSON body
	contentType string    // text/event-stream or application/json
	body        []byte
}

// recordedFixtures returns every recorded stream of a metered API (chat,
// completions, the Responses API, Anthropic's Messages API) and every
// recorded JSON error body.
func recordedFixtures(t *testing.T) []recordedFixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixturesDir, "PROVENANCE.tsv"))
	if err != nil {
		t.Fatalf("cannot read the recorded streams (they must be at %s, relative to the proxy package): %v", fixturesDir, err)
	}
	r := csv.NewReader(bytes.NewReader(b))
	r.Comma, r.LazyQuotes, r.FieldsPerRecord = '\t', true, -1
	rows, err := r.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var out []recordedFixture
	for _, row := range rows[1:] {
		if len(row) < 2 {
			continue
		}
		f := recordedFixture{name: row[0], api: meter.APIChat, status: 200, contentType: "text/event-stream"}
		kind := row[1]
		switch {
		case strings.HasPrefix(kind, "openai-responses"):
			f.api = meter.APIResponses
		case strings.HasPrefix(kind, "anthropic-messages"):
			f.api = meter.APIMessages
		case strings.HasPrefix(kind, "openai-chat-stream"), strings.HasPrefix(kind, "openai-compat-chat-stream"),
			strings.HasPrefix(kind, "vllm-chat-stream"), strings.HasPrefix(kind, "llamacpp-chat-stream"),
			kind == "tgi-openai-chat-stream", kind == "error-midstream-event", kind == "error-midstream-chunk":
		case strings.HasPrefix(kind, "openai-completions-stream"), strings.HasPrefix(kind, "vllm-completions-stream"):
			f.api = meter.APICompletions
		case strings.HasPrefix(kind, "error-http-") && strings.HasSuffix(f.name, ".json"):
			f.status, err = strconv.Atoi(strings.TrimPrefix(kind, "error-http-"))
			if err != nil {
				t.Fatalf("%s: kind %s", f.name, kind)
			}
			f.contentType = "application/json"
		default:
			continue
		}
		if f.body, err = os.ReadFile(filepath.Join(fixturesDir, filepath.FromSlash(f.name))); err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	if len(out) < 25 {
		t.Fatalf("only %d recorded fixtures found", len(out))
	}
	return out
}

// streamOptions are the client's stream options the tests cover: the
// member inserted in the request body (empty: none).
var streamOptions = []string{
	``,
	`"stream_options":null,`,
	`"stream_options":{"include_usage":true},`,
	`"stream_options":{"include_usage":false},`,
	`"stream_options":{"include_usage":null},`,
	`"stream_options":{"continuous_usage_stats":true},`,
	`"stream_options":{"include_usage":true,"continuous_usage_stats":true},`,
	`"stream_options":{"include_usage":false,"continuous_usage_stats":true},`,
	`"stream_options":{},`,
}

// continuousUsage reports whether vLLM (and the simulator) send usage on
// every chunk for these options.
func continuousUsage(opt string) bool {
	return strings.Contains(opt, `"continuous_usage_stats":true`) && !strings.Contains(opt, `"include_usage":false`)
}

// recordShape is what must be the same in two records of identical
// requests: everything but times and ids (times only as known or not).
type recordShape struct {
	Tenant, Model, Route, Error  string
	Stream                       bool
	Status                       int
	Outcome                      meter.Outcome
	ISL, OSL, Events, Gaps, Lead int
	Usage                        meter.UsageSource
	TTFT, TTFTContent, E2E, TPOT bool
	MaxITL                       bool
	TokensPerEvent               []int
}

func shapeOf(r *meter.Record) recordShape {
	return recordShape{
		Tenant: r.Tenant, Model: r.Model, Route: r.Route, Error: r.ErrorMessage,
		Stream: r.Stream, Status: r.Status, Outcome: r.Outcome,
		ISL: r.ISL, OSL: r.OSL, Events: r.Events, Gaps: len(r.ITL), Lead: r.LeadEvents, Usage: r.UsageSource,
		TTFT: r.TTFT >= 0, TTFTContent: r.TTFTContent >= 0, E2E: r.E2E >= 0, TPOT: r.TPOT >= 0,
		MaxITL: r.MaxITL >= 0, TokensPerEvent: append([]int{}, r.TokensPerEvent...),
	}
}

// byID collects n records keyed by request id.
func (g *gateway) byID(t *testing.T, n int) map[string]meter.Record {
	t.Helper()
	recs := make(map[string]meter.Record, n)
	for len(recs) < n {
		r := g.record(t)
		if _, dup := recs[r.RequestID]; dup {
			t.Fatalf("two records for %s", r.RequestID)
		}
		recs[r.RequestID] = r
	}
	g.noMoreRecords(t)
	return recs
}

// A pooled stream must start every request from nothing: through one
// gateway, the same request sent again and again (interleaved with every
// other kind of response, so each reuses streams that served another)
// gives the same record and the same client bytes every time, and the
// record a meter that served nothing else gives. Responses: the simulator
// (chat and completions, with every stream option it honours as vLLM
// does).
func TestPooledStreamsKeepNoState(t *testing.T) { testPooledStreams(t, false) }

// The same with every recorded engine stream and error body too (testdata,
// as for the meter's tests).
func TestPooledStreamsKeepNoStateRecorded(t *testing.T) { testPooledStreams(t, true) }

func testPooledStreams(t *testing.T, recorded bool) {
	const reps = 4
	var fixtures []recordedFixture
	if recorded {
		fixtures = recordedFixtures(t)
	}
	up := startRawUpstream(t, func(c *scriptConn) {
		name := string(c.Req.Header.Peek("X-Fixture"))
		for _, f := range fixtures {
			if f.name != name {
				continue
			}
			if f.contentType == "application/json" {
				fmt.Fprintf(c.BW, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", f.status, len(f.body), f.body)
				c.BW.Flush()
				return
			}
			writeSSEHead(c)
			// In reads that split events, as a network would.
			for b := f.body; len(b) > 0; {
				n := min(len(b), 97)
				writeChunk(c, string(b[:n]))
				b = b[n:]
			}
			endChunks(c)
			return
		}
		fmt.Fprintf(c.BW, "HTTP/1.1 500 X\r\nContent-Length: 0\r\n\r\n")
		c.BW.Flush()
	})
	_, simURL := startSim(t, sim.Config{})
	gFix := startGateway(t, Config{Upstream: up.URL()})
	gSim := startGateway(t, Config{Upstream: simURL})

	type call struct {
		g       *gateway
		id      string
		path    string
		body    string
		hdr     map[string]string
		replies []string
	}
	var calls []*call
	for oi, opt := range streamOptions {
		for _, f := range fixtures {
			c := &call{g: gFix, id: fmt.Sprintf("fix-%d-%s", oi, f.name), path: "/v1/chat/completions",
				body: `{"model":"m","stream":true,` + opt + `"messages":[{"role":"user","content":"hi"}]}`,
				hdr:  map[string]string{"X-Fixture": f.name}}
			switch f.api {
			case meter.APICompletions:
				c.path = "/v1/completions"
				c.body = `{"model":"m","stream":true,` + opt + `"prompt":"hi"}`
			case meter.APIResponses:
				c.path = "/v1/responses"
				c.body = `{"model":"m","stream":true,` + opt + `"input":"hi"}`
			case meter.APIMessages:
				c.path = "/v1/messages"
				c.body = `{"model":"m","stream":true,` + opt + `"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`
			}
			calls = append(calls, c)
		}
		for _, completions := range []bool{false, true} {
			c := &call{g: gSim, id: fmt.Sprintf("sim-%d-chat", oi), path: "/v1/chat/completions",
				body: `{"model":"sim-llama","stream":true,"max_tokens":6,"ignore_eos":true,` + opt + `"messages":[{"role":"user","content":"hi"}]}`}
			if completions {
				c.id = fmt.Sprintf("sim-%d-completions", oi)
				c.path = "/v1/completions"
				c.body = `{"model":"sim-llama","stream":true,"max_tokens":6,"ignore_eos":true,` + opt + `"prompt":"hi"}`
			}
			calls = append(calls, c)
		}
	}
	for rep := 0; rep < reps; rep++ {
		for _, c := range calls {
			hdr := map[string]string{"X-Request-Id": fmt.Sprintf("%s/%d", c.id, rep)}
			for k, v := range c.hdr {
				hdr[k] = v
			}
			_, _, got, _ := post(t, c.g.URL()+c.path, c.body, hdr)
			// The simulator's ids echo the request id; created is its clock.
			got = strings.ReplaceAll(got, hdr["X-Request-Id"], c.id)
			c.replies = append(c.replies, createdRE.ReplaceAllString(got, `"created":0`))
		}
	}
	nFix, nSim := 0, 0
	for _, c := range calls {
		if c.g == gFix {
			nFix += reps
		} else {
			nSim += reps
		}
	}
	recs := gFix.byID(t, nFix)
	for id, r := range gSim.byID(t, nSim) {
		recs[id] = r
	}
	ids := make([]string, 0, len(calls))
	byID := map[string]*call{}
	for _, c := range calls {
		ids = append(ids, c.id)
		byID[c.id] = c
	}
	sort.Strings(ids)
	for _, id := range ids {
		c := byID[id]
		first, ok := recs[id+"/0"]
		if !ok {
			t.Fatalf("%s: no record", id)
		}
		want := shapeOf(&first)
		for rep := 1; rep < reps; rep++ {
			r := recs[fmt.Sprintf("%s/%d", id, rep)]
			if got := shapeOf(&r); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: request %d recorded\n%+v\nthe first\n%+v", id, rep, got, want)
			}
			if c.replies[rep] != c.replies[0] {
				t.Errorf("%s: request %d: the client got\n%q\nthe first got\n%q", id, rep, c.replies[rep], c.replies[0])
			}
		}
	}
	// Every request was preceded by others, so a state carried over would
	// show in every repetition alike: compare with a meter that never
	// served anything else.
	for oi := range streamOptions {
		for _, f := range fixtures {
			id := fmt.Sprintf("fix-%d-%s", oi, f.name)
			r := recs[id+"/0"]
			want := freshMeasure(t, f)
			if r.Events != want.Events || r.ISL != want.ISL || r.OSL != want.OSL || r.UsageSource != want.UsageSource ||
				len(r.ITL) != len(want.ITL) || !reflect.DeepEqual(r.TokensPerEvent, want.TokensPerEvent) || (r.TTFT >= 0) != (want.TTFT >= 0) {
				t.Errorf("%s: events %d isl %d osl %d %v gaps %d tpe %v; a fresh meter: events %d isl %d osl %d %v gaps %d tpe %v",
					id, r.Events, r.ISL, r.OSL, r.UsageSource, len(r.ITL), r.TokensPerEvent,
					want.Events, want.ISL, want.OSL, want.UsageSource, len(want.ITL), want.TokensPerEvent)
			}
		}
	}
	// The simulator's records are known outright: 6 tokens, one event
	// each, and usage from the engine whatever the client asked (the gateway
	// asks when the client did not).
	for oi, opt := range streamOptions {
		for _, route := range []string{"chat", "completions"} {
			r := recs[fmt.Sprintf("sim-%d-%s/0", oi, route)]
			events := 6 + 1 // the finish chunk
			tpe := []int{1, 1, 1, 1, 1, 1, 0}
			if route == "chat" {
				events++ // the role chunk
				tpe = append([]int{0}, tpe...)
			}
			if !continuousUsage(opt) {
				tpe = []int{}
			}
			if r.Outcome != meter.OutcomeOK || r.OSL != 6 || r.UsageSource != meter.UsageUpstream || r.Events != events || len(r.ITL) != events-1 {
				t.Errorf("sim %s %s: outcome %v osl %d (%v) events %d gaps %d, want ok 6 (usage) %d %d", route, opt, r.Outcome, r.OSL, r.UsageSource, r.Events, len(r.ITL), events, events-1)
			}
			if !reflect.DeepEqual(append([]int{}, r.TokensPerEvent...), tpe) {
				t.Errorf("sim %s %s: tokens per event %v, want %v", route, opt, r.TokensPerEvent, tpe)
			}
		}
	}
	// And the client got exactly what the engine would have sent it
	// directly: usage chunk and all when it asked (stream_options:{} asks,
	// as vLLM's include_usage defaults to true), none when it did not.
	for _, c := range calls {
		if c.g != gSim {
			continue
		}
		id := c.id + "/direct"
		_, _, direct, err := post(t, simURL+c.path, c.body, map[string]string{"X-Request-Id": id})
		if err != nil {
			t.Fatal(err)
		}
		direct = createdRE.ReplaceAllString(strings.ReplaceAll(direct, id, c.id), `"created":0`)
		if c.replies[0] != direct {
			t.Errorf("%s: the client got\n%q\nthe engine sends directly\n%q", c.id, c.replies[0], direct)
		}
	}
}

// freshMeasure meters a fixture with a framer, parser and meter that never
// saw anything else.
func freshMeasure(t *testing.T, f recordedFixture) meter.Record {
	var (
		m    meter.Meter
		rec  meter.Record
		info meter.EventInfo
	)
	rec.Reset()
	t0 := time.Now()
	m.Start(t0)
	if f.contentType == "application/json" {
		if meter.ParseResponseBody(meter.APIChat, f.body, 1, &info) == nil {
			m.ObserveBody(&info, t0)
		} else {
			m.ObserveBody(nil, t0)
		}
		m.Finish(&rec)
		return rec
	}
	var (
		fr meter.SSEFramer
		ev meter.Event
	)
	var p meter.StreamParser
	fr.Feed(f.body)
	for {
		ok, err := fr.Next(&ev)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if !ok {
			if ok, _ = fr.Flush(&ev); !ok {
				break
			}
		}
		if (ev.HasData || len(ev.Type) > 0) && p.Parse(f.api, &ev, &info) == nil {
			m.Observe(&info, t0)
		}
	}
	m.Finish(&rec)
	return rec
}
