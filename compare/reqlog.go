package compare

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/goodput/goodput/meter"
)

// Filter restricts a real source to one tenant and/or model ("" is any).
type Filter struct {
	Tenant, Model string
	// RequestIDPrefix keeps, from a request log, the records whose
	// request_id starts with it: one benchmark run's requests (goodput
	// bench's --request-id-prefix, or the bench-<8 hex>- it chose), less
	// its calibration and warm-up requests (<prefix>calibrate-,
	// <prefix>warmup-), which the benchmark leaves out of its figures too.
	// Other sources have no request ids.
	RequestIDPrefix string
}

// keepsID reports whether a record with request id id passes the filter.
func (f Filter) keepsID(id string) bool {
	p := f.RequestIDPrefix
	if p == "" {
		return true
	}
	if !strings.HasPrefix(id, p) {
		return false
	}
	// bench names its calibration and warm-up requests <run prefix>
	// calibrate-N and warmup-N, whether P is the run's whole prefix or
	// one several runs share ("bench-").
	rest := id[len(p):]
	return !strings.Contains(rest, "calibrate-") && !strings.Contains(rest, "warmup-")
}

func (f Filter) String() string {
	s := f.scope()
	if f.RequestIDPrefix != "" {
		s += ", request ids " + f.RequestIDPrefix + "…"
	}
	return s
}

func (f Filter) scope() string {
	switch {
	case f.Tenant != "" && f.Model != "":
		return "tenant " + f.Tenant + ", model " + f.Model
	case f.Tenant != "":
		return "tenant " + f.Tenant
	case f.Model != "":
		return "model " + f.Model
	}
	return "all traffic"
}

// logLine is the part of a gateway request log record (meter.Record's JSON
// Lines form) that a comparison reads.
type logLine struct {
	Time    *string    `json:"time"`
	ID      string     `json:"request_id"`
	Tenant  string     `json:"tenant"`
	Model   string     `json:"model"`
	Route   string     `json:"route"`
	Defer   bool       `json:"deferred"`
	ModelOp string     `json:"model_op"`
	Outcome string     `json:"outcome"`
	Status  int        `json:"status"`
	Stream  *bool      `json:"stream"`
	ISL     *float64   `json:"isl"`
	OSL     *float64   `json:"osl"`
	TTFT    *float64   `json:"ttft_ms"`
	E2E     *float64   `json:"e2e_ms"`
	TPOT    *float64   `json:"tpot_ms"`
	ITL     []*float64 `json:"itl_ms"`
	Trunc   int        `json:"itl_truncated"`
	Events  *int       `json:"events"`
}

// impossible says what of l no gateway record holds: a count (isl, osl)
// that is not a whole number from 0 to maxTokens, a time below 0 or past
// what a Go duration holds; "" when nothing.
func (l *logLine) impossible() string {
	const maxMs = maxSeconds * 1000
	for _, f := range []struct {
		name  string
		v     *float64
		count bool
	}{{"isl", l.ISL, true}, {"osl", l.OSL, true}, {"ttft_ms", l.TTFT, false}, {"e2e_ms", l.E2E, false}, {"tpot_ms", l.TPOT, false}} {
		switch {
		case f.v == nil:
		case f.count && (!(*f.v >= 0 && *f.v <= maxTokens) || *f.v != math.Trunc(*f.v)):
			return fmt.Sprintf("%s is %s: want a whole number of tokens from 0 to %d", f.name, fmtValue(*f.v), maxTokens)
		case !(*f.v >= 0 && *f.v <= maxMs):
			return fmt.Sprintf("%s is %s: want milliseconds from 0 to 9.22e12", f.name, fmtValue(*f.v))
		}
	}
	for _, g := range l.ITL {
		if g != nil && !(*g >= 0 && *g <= maxMs) {
			return fmt.Sprintf("a gap of itl_ms is %s: want milliseconds from 0 to 9.22e12", fmtValue(*g))
		}
	}
	return ""
}

// miss says whether a failed record counts against attainment, as the
// gateway's judge counts it (without a class's count_client_errors): not
// one without a valid key (unauthorized), nor one refused for the
// client's own mistake (a 4xx other than 408 and 429 from the engine or
// the gateway); a client that left before the engine sent anything (499)
// only when its wait already broke a bound (failedReq.counts).
func (l *logLine) miss() (failedReq, bool) {
	e2e := math.NaN()
	if l.E2E != nil {
		e2e = *l.E2E
	}
	rec := meter.Record{Status: l.Status} // an outcome not named below: a miss, as any failure
	for _, o := range meter.Outcomes() {
		if o.String() == l.Outcome {
			rec.Outcome = o
		}
	}
	switch {
	case rec.Outcome == meter.OutcomeUnauthorized, rec.ClientMistake():
		return failedReq{}, false
	case rec.Outcome == meter.OutcomeClientAbort && rec.Status == meter.StatusClientClosed:
		return failedReq{early: true, e2e: e2e}, true
	}
	return failedReq{e2e: e2e}, true
}

// maxLogLine bounds one request log line (a record keeps at most a few
// thousand gaps: far below this).
const maxLogLine = 16 << 20

// ReadRequestLog reads a gateway request log (JSON Lines, one
// meter.Record per line, as the gateway's request log writes them) and
// keeps the inference requests of f.
//
// ISL and OSL are those of the requests with outcome ok and both counts
// known (as the workload profile measures them); latencies are those of
// the requests with outcome ok; arrivals are every inference request's
// start (`time`); concurrency is from [time, time + e2e_ms) of the
// requests with outcome ok whose E2E is known (vLLM counts its successful
// requests only).
func ReadRequestLog(name string, r io.Reader, f Filter) (*Side, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLogLine)
	s := newSide(KindRequestLog, name)
	s.perRequest = true
	var isl, osl, ttft, tpot, e2e, arr, cs, ce []float64
	// The gaps, hundreds a request, are kept as a count of each value: a
	// log writes them to the µs, so a day's millions of requests hold a
	// few thousand distinct gaps (the same multiset, in their room).
	itl := map[float64]float64{}
	lineNo, records, failed, noE2E, truncated, empty := 0, 0, 0, 0, 0, 0
	var first, last time.Time
	// Lines cut short (their JSON ends early): the last of a log still
	// being written, or a record a gateway stopped in (killed mid-write,
	// a full disk), which the next run's first record follows on a line
	// of its own.
	cuts, lastCut := 0, 0
	for sc.Scan() {
		lineNo++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var l logLine
		if err := json.Unmarshal(b, &l); err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) && se.Offset >= int64(len(b)) && bytes.HasPrefix(b, []byte(`{"`)) {
				cuts, lastCut = cuts+1, lineNo
				continue
			}
			if lineNo == 1 {
				return nil, inputErr("%s: not a request log (JSON Lines of request records): line 1: %v", name, err)
			}
			return nil, inputErr("%s: line %d: not a JSON request record: %v", name, lineNo, err)
		}
		if f := l.impossible(); f != "" {
			return nil, inputErr("%s: line %d: %s: not a record the gateway writes", name, lineNo, f)
		}
		if lineNo == 1 && l.Route == "" && l.Outcome == "" {
			return nil, inputErr("%s: line 1 is JSON but not a request record (no route or outcome)", name)
		}
		if l.Route == "" || l.Route == "other" || l.Defer || l.ModelOp != "" {
			continue // not an inference request: listings, health checks, a background request's acknowledgement
		}
		if (f.Tenant != "" && l.Tenant != f.Tenant) || (f.Model != "" && l.Model != f.Model) || !f.keepsID(l.ID) {
			continue
		}
		records++
		var start time.Time
		if l.Time != nil {
			t, err := time.Parse(time.RFC3339Nano, *l.Time)
			if err != nil {
				return nil, inputErr("%s: line %d: time %q is not RFC 3339", name, lineNo, *l.Time)
			}
			start = t
			sec := float64(t.UnixNano()) / 1e9
			arr = append(arr, sec)
			if first.IsZero() || t.Before(first) {
				first = t
			}
			if t.After(last) {
				last = t
			}
		}
		if l.Outcome != "ok" {
			failed++
			if f, ok := l.miss(); ok {
				s.missed = append(s.missed, f)
			}
			continue
		}
		if l.ISL != nil && l.OSL != nil {
			isl = append(isl, *l.ISL)
			osl = append(osl, *l.OSL)
		}
		r := reqLat{ttft: math.NaN(), tpot: math.NaN(), e2e: math.NaN()}
		if l.TTFT != nil {
			r.ttft = *l.TTFT
			ttft = append(ttft, r.ttft)
		}
		if l.E2E != nil {
			r.e2e = *l.E2E
			e2e = append(e2e, r.e2e)
			if !start.IsZero() {
				sec := float64(start.UnixNano()) / 1e9
				cs = append(cs, sec)
				ce = append(ce, sec+r.e2e/1000)
			}
		} else {
			noE2E++
		}
		switch {
		case l.TPOT != nil:
			r.tpot = *l.TPOT
			tpot = append(tpot, r.tpot)
		case l.OSL != nil && *l.OSL <= 1, l.Events == nil, *l.Events <= 1:
			// Undefined, so 0, as the gateway's judge takes it (and vLLM
			// bench, of one output token): one token or none, a body (no
			// events: every token came with it), at most one token event.
			r.tpot = 0
		}
		for _, g := range l.ITL {
			if g != nil {
				itl[*g]++
			}
		}
		if l.Trunc > 0 {
			truncated++
		}
		if l.Stream != nil && *l.Stream && l.TTFT == nil && (l.Events != nil && *l.Events == 0 || l.Events == nil && l.OSL != nil && *l.OSL == 0) {
			// A stream that ended as it should with no token event in
			// it (whatever its usage said): ok for the gateway, failed
			// for vLLM's client and goodput bench ("no token event").
			empty++
		}
		if l.TTFT == nil && !math.IsNaN(r.e2e) {
			// An ok response without a first token event is judged as the
			// gateway judges it (docs/MEASURES.md, SLO classes): a body's
			// tokens all came with it, and so did a stream's if any came,
			// so E2E stands in for TTFT. Its distributions keep what the
			// record has (no TTFT).
			r.ttft = r.e2e
		}
		s.reqs = append(s.reqs, r)
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return nil, inputErr("%s: line %d is longer than %d MiB: not a request log", name, lineNo+1, maxLogLine>>20)
		}
		return nil, inputErr("%s: %v", name, err)
	}
	if lineNo == 0 {
		return nil, inputErr("%s: empty request log", name)
	}
	if records == 0 {
		return nil, inputErr("%s: no inference request of %s in %d lines", name, f, lineNo)
	}
	s.Label = f.String()
	s.Requests = len(s.reqs)
	s.Failed = Num(failed)
	if !first.IsZero() && last.After(first) {
		s.Seconds = Num(last.Sub(first).Seconds())
	}
	s.ISL, s.OSL = sampleDist(isl), sampleDist(osl)
	s.TTFT, s.TPOT, s.ITL, s.E2E = sampleDist(ttft), sampleDist(tpot), countDist(itl), sampleDist(e2e)
	s.setArrivals(arr, "measured from the records' start times")
	if len(cs) > 0 {
		s.setConcurrency(cs, ce, "measured from start times and E2E")
	}
	if n := s.Requests - len(isl); n > 0 {
		s.note("%d completed requests have no token counts and are left out of ISL/OSL", n)
	}
	if empty > 0 {
		s.note("%d completed streams carried no token event (the engine ended them with none): the gateway counts them ok, vLLM's client and goodput bench failed; they are completed here", empty)
	}
	if noE2E > 0 {
		s.note("%d completed requests have no E2E and are left out of concurrency", noE2E)
	}
	if truncated > 0 {
		s.note("%d requests logged only their first gaps (itl_truncated): ITL uses the logged gaps", truncated)
	}
	if failed > 0 {
		const rest = "left out of every figure but arrivals, and count%s as misses in attainment unless refused for the client's own mistake (a 4xx other than 408 and 429), without a valid key, or left before the engine answered within the SLO's bounds"
		if failed == 1 {
			s.note("1 request did not complete (outcome other than ok): it is "+rest, "s")
		} else {
			s.note("%d requests did not complete (outcome other than ok): they are "+rest, failed, "")
		}
	}
	switch {
	case cuts == 1 && lastCut == lineNo:
		s.note("the last line (%d) is not a whole record (a log still being written, or cut): left out", lastCut)
	case cuts == 1:
		s.note("line %d is not a whole record (cut: a gateway stopped in the middle of writing it): left out", lastCut)
	case cuts > 0:
		s.note("%d lines are not whole records (cut: a gateway stopped in the middle of writing them, or the log is still being written; the last, line %d): left out", cuts, lastCut)
	}
	return s, nil
}
