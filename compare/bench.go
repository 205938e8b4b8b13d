package compare

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/goodput/goodput/internal/remote"
)

// InputError is an error in what the user gave (a file, a flag, a source
// that answers nonsense): the command exits 2 for it.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

func inputErr(format string, a ...any) error { return &InputError{Err: fmt.Errorf(format, a...)} }

// BenchOptions chooses one result of a benchmark file.
type BenchOptions struct {
	// Run picks one result of a file that holds several (vLLM bench's
	// --append-result writes one JSON object per run): 1 is the first, -1
	// the last. 0 means the last. Of a goodput bench --sweep result it
	// picks the step the same way, and 0 is an error: no step stands for
	// the sweep.
	Run int
}

// ReadBench reads a benchmark result: a JSON object with vLLM bench
// serve's field names, as `vllm bench serve --save-result` (or the older
// benchmarks/benchmark_serving.py) saves it, or as goodput bench writes it.
// A file of several results (one per line, --append-result) is read whole
// and one of them is used (BenchOptions.Run); of a goodput bench --sweep
// result, BenchOptions.Run picks the step, and must be given.
//
// With --save-detailed (or from goodput bench) the result has per-request
// arrays (input_lens, output_lens, ttfts, itls, latencies, start_times,
// errors): every figure is then derived per request. Without them the
// summary fields are used (mean_/median_/pNN_ latency fields, configured
// request_rate and burstiness, max_concurrent_requests) and distribution
// tests that need more are skipped, with a note.
func ReadBench(name string, data []byte, o BenchOptions) (*Side, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, inputErr("%s: empty file", name)
	}
	data = pythonJSON(data)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var docs []map[string]json.RawMessage
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, inputErr("%s: %s", name, jsonErr(err, data, dec.InputOffset()))
		}
		t := bytes.TrimSpace(raw)
		if len(t) > 0 && t[0] == '[' {
			return nil, inputErr("%s: a JSON array, not a benchmark result object (the .pytorch.json file vLLM writes beside a result is not the result: give the result's .json)", name)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, inputErr("%s: want a JSON object with vLLM bench serve's fields: %v", name, err)
		}
		docs = append(docs, m)
	}
	if len(docs) == 0 {
		return nil, inputErr("%s: no JSON object", name)
	}
	if len(docs) == 1 && isSweep(docs[0]) {
		return sweepStep(name, docs[0], o)
	}
	i := len(docs) - 1
	switch {
	case o.Run > 0:
		i = o.Run - 1
	case o.Run < 0:
		i = len(docs) + o.Run
	}
	if i < 0 || i >= len(docs) {
		return nil, inputErr("%s: holds %d results; there is no result %d", name, len(docs), o.Run)
	}
	s, err := benchSide(name, docs[i])
	if err != nil {
		return nil, err
	}
	if len(docs) > 1 {
		s.note("the file holds %d results; this is result %d (--bench-run picks another)", len(docs), i+1)
	}
	return s, nil
}

// isSweep reports whether a document is a goodput bench --sweep result:
// its ladder, its step summaries and every step's bench result.
func isSweep(m map[string]json.RawMessage) bool {
	_, ladder := m["sweep"]
	_, steps := m["steps"]
	_, results := m["results"]
	return ladder && steps && results
}

// sweepStep reads the bench result of the sweep step o.Run (1 the first,
// −1 the last); a sweep has no default step.
func sweepStep(name string, m map[string]json.RawMessage, o BenchOptions) (*Side, error) {
	var ladder string
	_ = json.Unmarshal(m["sweep"], &ladder)
	var results []json.RawMessage
	if err := json.Unmarshal(m["results"], &results); err != nil {
		return nil, inputErr("%s: a goodput bench --sweep result whose \"results\" is not an array of step results: %v", name, err)
	}
	n := len(results)
	if o.Run == 0 {
		return nil, inputErr("%s: a goodput bench --sweep result (%s, %d steps), not one run: give --bench-run STEP (1 to %d, or -1 the last) to compare one step's run", name, ladder, n, n)
	}
	i := o.Run - 1
	if o.Run < 0 {
		i = n + o.Run
	}
	if i < 0 || i >= n {
		return nil, inputErr("%s: a sweep of %d steps (%s); there is no step %d", name, n, ladder, o.Run)
	}
	var step map[string]json.RawMessage
	if err := json.Unmarshal(results[i], &step); err != nil {
		return nil, inputErr("%s: step %d of the sweep: want a benchmark result object: %v", name, i+1, err)
	}
	if step == nil {
		return nil, inputErr("%s: step %d of the sweep (%s) could not run: it has no result", name, i+1, ladder)
	}
	s, err := benchSide(name, step)
	if err != nil {
		return nil, err
	}
	s.note("a sweep result (%s): this is step %d of %d (--bench-run picks another)", ladder, i+1, n)
	return s, nil
}

// pythonJSON replaces the NaN, Infinity and -Infinity that Python's json
// module writes (outside strings) by null, which Go's decoder reads.
func pythonJSON(b []byte) []byte {
	if !bytes.Contains(b, []byte("NaN")) && !bytes.Contains(b, []byte("Infinity")) {
		return b
	}
	out := make([]byte, 0, len(b))
	inStr := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inStr {
			out = append(out, c)
			if c == '\\' && i+1 < len(b) {
				i++
				out = append(out, b[i])
			} else if c == '"' {
				inStr = false
			}
			continue
		}
		switch {
		case c == '"':
			inStr = true
			out = append(out, c)
		case bytes.HasPrefix(b[i:], []byte("NaN")):
			out = append(out, "null"...)
			i += 2
		case bytes.HasPrefix(b[i:], []byte("-Infinity")):
			out = append(out, "null"...)
			i += 8
		case bytes.HasPrefix(b[i:], []byte("Infinity")):
			out = append(out, "null"...)
			i += 7
		default:
			out = append(out, c)
		}
	}
	return out
}

// jsonErr explains a decoding error: a truncated document or a syntax
// error with its line.
func jsonErr(err error, data []byte, off int64) string {
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON: the file ends in the middle of a value"
	case errors.As(err, &se):
		line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
		return fmt.Sprintf("not valid JSON (line %d, byte %d): %v", line, se.Offset, err)
	}
	return fmt.Sprintf("not valid JSON near byte %d: %v", off, err)
}

// benchDoc reads fields of one result object.
type benchDoc struct {
	name string
	m    map[string]json.RawMessage
	err  error
}

func (d *benchDoc) has(k string) bool {
	v, ok := d.m[k]
	return ok && string(bytes.TrimSpace(v)) != "null"
}

// num reads a number field; NaN when absent or null.
func (d *benchDoc) num(k string) float64 {
	if !d.has(k) {
		return math.NaN()
	}
	var n json.Number
	if err := json.Unmarshal(d.m[k], &n); err != nil {
		var s string
		if json.Unmarshal(d.m[k], &s) == nil {
			if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
				return f
			}
			return math.NaN()
		}
		d.fail("field %q: want a number", k)
		return math.NaN()
	}
	f, err := n.Float64()
	if err != nil {
		d.fail("field %q: %v", k, err)
		return math.NaN()
	}
	return f
}

// str reads the string field k ("" when absent; a value of another type as
// its JSON text). What a terminal would act on is escaped
// (remote.Printable): the label
// and model_id are printed, and a result's model_id is the engine's own
// name when the benchmark took the first model of /v1/models (vLLM's, and
// goodput bench's without --model), so a hostile engine's ESC[2J cleared
// the screen of whoever compared the result.
func (d *benchDoc) str(k string) string {
	var s string
	if d.has(k) {
		if json.Unmarshal(d.m[k], &s) != nil {
			return remote.Printable(strings.Trim(string(d.m[k]), `"`))
		}
	}
	return remote.Printable(s)
}

// floats reads an array of numbers (null entries read as NaN).
func (d *benchDoc) floats(k string) []float64 {
	if !d.has(k) {
		return nil
	}
	var xs []*float64
	if err := json.Unmarshal(d.m[k], &xs); err != nil {
		d.fail("field %q: want an array of numbers: %v", k, err)
		return nil
	}
	out := make([]float64, len(xs))
	for i, p := range xs {
		if p == nil {
			out[i] = math.NaN()
		} else {
			out[i] = *p
		}
	}
	return out
}

func (d *benchDoc) fail(format string, a ...any) {
	if d.err == nil {
		d.err = inputErr("%s: "+format, append([]any{d.name}, a...)...)
	}
}

var pctField = regexp.MustCompile(`^(mean|median|std|max|p[0-9]+(?:\.[0-9]+)?)_(ttft|tpot|itl|e2el)_ms$`)

func benchSide(name string, m map[string]json.RawMessage) (*Side, error) {
	d := &benchDoc{name: name, m: m}
	if d.has("format") && strings.HasPrefix(d.str("format"), "goodput.") {
		return nil, inputErr("%s: a %s document, not a benchmark result (give it as --real)", name, d.str("format"))
	}
	if d.has("route") && d.has("outcome") {
		return nil, inputErr("%s: a gateway request log, not a benchmark result (give it as --real)", name)
	}
	if !d.has("completed") && !d.has("input_lens") && !d.has("duration") {
		return nil, inputErr("%s: not a benchmark result: none of vLLM bench serve's fields (completed, duration, input_lens) is there", name)
	}
	s := newSide(KindBench, name)
	s.Label = d.str("label")
	if s.Label == "" {
		s.Label = d.str("model_id")
	}
	dur := d.num("duration")
	if dur > 0 {
		s.Seconds = Num(dur)
	}
	completed, fileFailed := d.num("completed"), d.num("failed")
	for _, c := range []struct {
		k string
		v float64
	}{{"completed", completed}, {"failed", fileFailed}} {
		if !math.IsNaN(c.v) && (!(c.v >= 0 && c.v <= 1<<53) || c.v != math.Trunc(c.v)) {
			return nil, inputErr("%s: %s is %s: want a whole number of requests", name, c.k, fmtValue(c.v))
		}
	}
	if !math.IsNaN(fileFailed) {
		s.Failed, s.missLo, s.missHi = Num(fileFailed), Num(fileFailed), Num(fileFailed)
	}

	// Per-request arrays (--save-detailed, or goodput bench).
	inLens, outLens := d.floats("input_lens"), d.floats("output_lens")
	ttfts, lats, starts := d.floats("ttfts"), d.floats("latencies"), d.floats("start_times")
	var itls [][]float64
	if d.has("itls") {
		var raw [][]*float64
		if err := json.Unmarshal(d.m["itls"], &raw); err != nil {
			d.fail("field \"itls\": want an array of arrays of seconds: %v", err)
		}
		itls = make([][]float64, len(raw))
		for i, r := range raw {
			for _, p := range r {
				if p != nil {
					itls[i] = append(itls[i], *p)
				}
			}
		}
	}
	var errs []string
	if d.has("errors") {
		var raw []*string
		if err := json.Unmarshal(d.m["errors"], &raw); err != nil {
			d.fail("field \"errors\": want an array of strings: %v", err)
		}
		errs = make([]string, len(raw))
		for i, p := range raw {
			if p != nil {
				errs[i] = *p
			}
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	n := len(inLens)
	for _, a := range []struct {
		k string
		l int
		p bool
	}{{"output_lens", len(outLens), outLens != nil}, {"ttfts", len(ttfts), ttfts != nil}, {"latencies", len(lats), lats != nil},
		{"start_times", len(starts), starts != nil}, {"itls", len(itls), itls != nil}, {"errors", len(errs), errs != nil}} {
		if a.p && n == 0 {
			n = a.l
		}
		if a.p && a.l != n {
			return nil, inputErr("%s: per-request arrays of different lengths (input_lens or the first has %d, %s has %d)", name, n, a.k, a.l)
		}
	}
	if err := checkPerRequest(inLens, outLens, ttfts, lats, starts, itls); err != nil {
		return nil, inputErr("%s: %v", name, err)
	}
	detailed := n > 0 && inLens != nil && outLens != nil
	if detailed {
		var isl, osl, ttft, tpot, itl, e2e, arr, cs, ce []float64
		failed, silent := 0, 0
		for i := 0; i < n; i++ {
			// A failure: an error; or, as vLLM stores any failure, its
			// error empty for a non-200 answer without a reason (response.
			// reason or ""), output length 0 with latency 0 and TTFT 0
			// (those of the two the file has). A completed request has a
			// latency.
			noOutput := outLens[i] == 0 && (lats != nil || ttfts != nil) &&
				(lats == nil || lats[i] == 0) && (ttfts == nil || ttfts[i] == 0)
			ok := !noOutput
			switch {
			case errs != nil && errs[i] != "":
				ok = false
			case errs != nil && noOutput:
				silent++
			}
			// vLLM's start times are perf_counter readings; goodput
			// bench's count from the run's start (an open loop's first
			// one gap in, a closed loop's at about 0).
			// Older goodput bench files held a request never sent as a
			// failed one with a start time of 0; newer ones leave it out.
			if starts != nil && (ok || starts[i] > 0) {
				arr = append(arr, starts[i])
			}
			if !ok {
				failed++
				// A benchmark's failure is the service's: its requests
				// are well formed.
				s.missed = append(s.missed, failedReq{})
				continue
			}
			if ttfts != nil && lats != nil && ttfts[i] > lats[i] {
				return nil, inputErr("%s: ttfts[%d] is %s, after the request's end (latencies[%d] is %s): a completed request's first token cannot come after its last", name, i, fmtValue(ttfts[i]), i, fmtValue(lats[i]))
			}
			isl = append(isl, inLens[i])
			osl = append(osl, outLens[i])
			r := reqLat{ttft: math.NaN(), tpot: math.NaN(), e2e: math.NaN()}
			if ttfts != nil {
				r.ttft = ttfts[i] * 1000
			}
			switch {
			case lats != nil:
				r.e2e = lats[i] * 1000
			case ttfts != nil && itls != nil:
				sum := ttfts[i]
				for _, g := range itls[i] {
					sum += g
				}
				r.e2e = sum * 1000
			}
			if itls != nil {
				for _, g := range itls[i] {
					itl = append(itl, g*1000)
				}
			}
			if outLens[i] > 1 && !math.IsNaN(r.e2e) && !math.IsNaN(r.ttft) {
				r.tpot = (r.e2e - r.ttft) / (outLens[i] - 1)
				tpot = append(tpot, r.tpot)
			} else if !math.IsNaN(r.ttft) {
				r.tpot = 0 // vLLM: a request of one output token has TPOT 0 for goodput
			}
			if !math.IsNaN(r.ttft) {
				ttft = append(ttft, r.ttft)
			}
			if !math.IsNaN(r.e2e) {
				e2e = append(e2e, r.e2e)
				if starts != nil {
					cs = append(cs, starts[i])
					ce = append(ce, starts[i]+r.e2e/1000)
				}
			}
			s.reqs = append(s.reqs, r)
		}
		s.Requests = len(isl)
		if errs != nil || lats != nil || ttfts != nil {
			s.Failed, s.missLo, s.missHi = Num(failed), Num(failed), Num(failed)
		}
		s.ISL, s.OSL = sampleDist(isl), sampleDist(osl)
		s.TTFT, s.TPOT, s.ITL, s.E2E = sampleDist(ttft), sampleDist(tpot), sampleDist(itl), sampleDist(e2e)
		if silent > 0 {
			s.note("%d requests with an empty error but no output, TTFT and latency 0 (vLLM's record of a failed answer without a reason) are counted as failed", silent)
		}
		if !math.IsNaN(completed) && int(completed) != s.Requests {
			s.note("completed says %d, the per-request arrays hold %d completed requests: the arrays are used", int(completed), s.Requests)
		}
		if !math.IsNaN(fileFailed) && (errs != nil || lats != nil || ttfts != nil) && int(fileFailed) != failed {
			s.note("failed says %d, the per-request arrays hold %d failed requests: the arrays are used", int(fileFailed), failed)
		}
		if ttfts == nil {
			s.reqs, s.missed = nil, nil
		} else {
			s.perRequest = true
		}
		if s.Requests == 0 {
			s.note("no request completed (%d failed): there are no ISL, OSL or latency values", failed)
		}
		if len(arr) > 0 {
			s.setArrivals(arr, "measured from start_times")
		}
		if len(cs) > 0 {
			s.setConcurrency(cs, ce, "measured from start_times and latencies")
		}
	} else {
		if !math.IsNaN(completed) {
			s.Requests = int(completed)
		}
		s.note("no per-request arrays (saved without --save-detailed): ISL/OSL distributions cannot be compared, only means")
		if completed == 0 {
			s.note("no request completed: the summary's latency figures are vLLM's 0 for no values, not measurements, and are not used")
		}
		if ti := d.num("total_input_tokens"); ti >= 0 && s.Requests > 0 {
			s.ISL.Given = map[string]float64{"mean": ti / float64(s.Requests)}
		}
		if to := d.num("total_output_tokens"); to >= 0 && s.Requests > 0 {
			s.OSL.Given = map[string]float64{"mean": to / float64(s.Requests)}
		}
	}
	// Summary latency fields fill what per-request arrays cannot give: not
	// a measure the arrays give (when they hold no value of it, as when no
	// request completed, vLLM's summary holds 0 for "no values"), and
	// nothing of a file whose every request failed (by its arrays, or by
	// its counts without them).
	fromArrays := map[string]bool{}
	if detailed {
		e2eArrays := lats != nil || (ttfts != nil && itls != nil)
		fromArrays = map[string]bool{"ttft": ttfts != nil, "tpot": ttfts != nil && e2eArrays, "itl": itls != nil, "e2el": e2eArrays}
	}
	for k := range m {
		sm := pctField.FindStringSubmatch(k)
		if sm == nil || sm[1] == "std" || fromArrays[sm[2]] || (!detailed && completed == 0) || (detailed && s.Requests == 0) {
			continue
		}
		v := d.num(k)
		if math.IsNaN(v) {
			continue
		}
		var dist *Dist
		switch sm[2] {
		case "ttft":
			dist = &s.TTFT
		case "tpot":
			dist = &s.TPOT
		case "itl":
			dist = &s.ITL
		case "e2el":
			dist = &s.E2E
		}
		if dist.hasSamples() {
			continue
		}
		if dist.Given == nil {
			dist.Given = map[string]float64{}
		}
		key := sm[1]
		if key == "median" {
			key = "p50"
		}
		dist.Given[key] = v
	}
	if d.err != nil {
		return nil, d.err
	}

	// Arrivals: measured when start_times exist, else as configured.
	rate := d.num("request_rate")
	burst := d.num("burstiness")
	rateInf := strings.EqualFold(d.str("request_rate"), "inf")
	if known(s.ArrivalRate) && rate > 0 && !math.IsInf(rate, 0) {
		cfg := fmt.Sprintf("configured request_rate %s", fmtNum(rate))
		if burst > 0 {
			cfg += ", burstiness " + fmtNum(burst)
		}
		s.note("%s; measured from start_times: %s req/s, k %s", cfg, fmtNum(float64(s.ArrivalRate)), fmtNum(float64(s.Burstiness)))
	}
	if !known(s.ArrivalRate) {
		switch {
		case rate > 0 && !math.IsInf(rate, 0):
			s.ArrivalRate = Num(rate)
			s.RateFrom = "configured request_rate"
			if burst > 0 {
				if math.IsInf(burst, 1) {
					s.Regular, s.Burstiness = true, Num(math.Inf(1))
				} else {
					s.Burstiness = Num(burst)
				}
				s.BurstinessFrom = "configured burstiness"
			}
		case rateInf || math.IsInf(rate, 1):
			if tp := d.num("request_throughput"); tp > 0 {
				s.ArrivalRate = Num(tp)
				s.RateFrom = "request_throughput (request_rate inf: every request sent at once)"
			}
			s.note("request_rate inf: requests were sent at once, so there is no arrival process to compare")
		default:
			if tp := d.num("request_throughput"); tp > 0 {
				s.ArrivalRate = Num(tp)
				s.RateFrom = "request_throughput"
			}
		}
	}
	if !known(s.ConcPeak) {
		if p := d.num("max_concurrent_requests"); p > 0 {
			s.ConcPeak = Num(p)
			s.ConcFrom = "max_concurrent_requests"
		}
		// Little's law: mean in flight = throughput × mean latency.
		if tp, e := d.num("request_throughput"), s.E2E.Mean(); tp > 0 && known(e) {
			s.ConcMean = Num(tp * float64(e) / 1000)
			if s.ConcFrom == "" {
				s.ConcFrom = "Little's law"
			} else {
				s.ConcFrom += "; mean by Little's law (throughput × mean E2E)"
			}
		}
	}
	if mc := d.num("max_concurrency"); mc > 0 {
		s.note("the benchmark capped concurrency at %d (max_concurrency)", int(mc))
	}
	// The SLO the result was measured with, when it says so: the first
	// field that holds one. One compare cannot read is not dropped in
	// silence: a note says so, and the command refuses the file unless
	// --slo is given (OwnSLOError).
	var ownErr error
	if d.has("goodput_bench") {
		var ex struct {
			SLO     string `json:"slo"`
			Arrival struct {
				Loop        string `json:"loop"`
				Concurrency int    `json:"concurrency"`
			} `json:"arrival"`
		}
		if err := json.Unmarshal(d.m["goodput_bench"], &ex); err != nil {
			d.fail("field \"goodput_bench\": %v", err)
		}
		if ex.SLO != "" && ex.SLO != "none" {
			if o, err := ParseSLO(ex.SLO); err == nil {
				s.OwnSLO = &o
			} else {
				ownErr = fmt.Errorf("goodput_bench.slo: %v", err)
			}
		}
		if ex.Arrival.Loop == "closed" {
			s.note("a closed-loop benchmark (%d clients): each arrival waits for a completion, so its arrival rate and burstiness follow the server's latency", ex.Arrival.Concurrency)
		}
	}
	for _, k := range []string{"goodput", "goodput_config", "slo"} {
		if s.OwnSLO != nil || ownErr != nil {
			break
		}
		if !d.has(k) {
			continue
		}
		o, err := parseOwnSLO(d.m[k])
		if err != nil {
			ownErr = fmt.Errorf("field %q: %v", k, err)
		}
		s.OwnSLO = o
	}
	if ownErr != nil {
		s.ownSLOErr = ownErr
		s.note("the result's own SLO cannot be read (%v): it is not used", ownErr)
	}
	for _, k := range []string{"request_goodput", "request_goodput:"} {
		g := d.num(k)
		if math.IsNaN(g) {
			continue
		}
		if !(g >= 0 && g <= math.MaxFloat64) {
			return nil, inputErr("%s: %s is %s: want a rate of good requests, 0 or more", name, k, fmtValue(g))
		}
		// Good requests are completed ones: request_goodput × duration is
		// never more than completed (beyond the rounding of the two).
		done := completed
		if math.IsNaN(done) {
			done = float64(s.Requests)
		}
		if good := g * float64(s.Seconds); known(s.Seconds) && good > done*(1+1e-9)+1e-9 {
			return nil, inputErr("%s: %s %s req/s × duration %s s is %s good requests, more than the %s completed: the file is inconsistent", name, k, fmtNum(g), fmtNum(float64(s.Seconds)), fmtNum(good), fmtNum(done))
		}
		s.OwnGoodput = Num(g)
	}
	if d.err != nil {
		return nil, d.err
	}
	return s, nil
}

// maxTokens is the largest token count believed, as the gateway believes
// an engine's (meter: 2^31 − 1); maxSeconds the longest time, what a Go
// time.Duration holds (about 292 years), as every time the gateway measures.
const (
	maxTokens  = 1<<31 - 1
	maxSeconds = float64(math.MaxInt64) / 1e9
)

// checkPerRequest refuses a value no benchmark measures in the per-request
// arrays: a token count that is not a whole number from 0 to maxTokens, a
// time (seconds) below 0 or beyond maxSeconds. A null time (Python's NaN
// or Infinity) is unknown.
func checkPerRequest(inLens, outLens, ttfts, lats, starts []float64, itls [][]float64) error {
	for _, a := range []struct {
		k  string
		xs []float64
	}{{"input_lens", inLens}, {"output_lens", outLens}} {
		for i, x := range a.xs {
			if !(x >= 0 && x <= maxTokens) || x != math.Trunc(x) {
				return fmt.Errorf("%s[%d] is %s: want a whole number of tokens from 0 to %d", a.k, i, fmtValue(x), maxTokens)
			}
		}
	}
	for _, a := range []struct {
		k  string
		xs []float64
	}{{"ttfts", ttfts}, {"latencies", lats}} {
		for i, x := range a.xs {
			if !math.IsNaN(x) && !(x >= 0 && x <= maxSeconds) {
				return fmt.Errorf("%s[%d] is %s: want seconds from 0 to 9.22e9 (292 years)", a.k, i, fmtValue(x))
			}
		}
	}
	for i, gs := range itls {
		for j, g := range gs {
			if !(g >= 0 && g <= maxSeconds) {
				return fmt.Errorf("itls[%d][%d] is %s: want seconds from 0 to 9.22e9 (292 years)", i, j, fmtValue(g))
			}
		}
	}
	for i, x := range starts {
		if !(math.Abs(x) <= maxSeconds) {
			return fmt.Errorf("start_times[%d] is %s: want seconds within ±9.22e9 (292 years)", i, fmtValue(x))
		}
	}
	return nil
}

// fmtValue writes a value of a file as it reads, null for NaN.
func fmtValue(x float64) string {
	if math.IsNaN(x) {
		return "null"
	}
	return strconv.FormatFloat(x, 'g', -1, 64)
}

// parseOwnSLO reads a benchmark's SLO: an object {"ttft": ms, ...} (a
// number, or a string holding one), a list of "ttft:ms" strings (vLLM's
// --goodput arguments) or one such string. An empty one, or "none" (as
// goodput bench writes no SLO), is none (nil).
func parseOwnSLO(raw json.RawMessage) (*SLO, error) {
	var text string
	var obj map[string]json.RawMessage
	var list []string
	switch {
	case json.Unmarshal(raw, &obj) == nil:
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			var n json.Number
			var v string
			switch {
			case json.Unmarshal(obj[k], &n) == nil:
				v = n.String()
			case json.Unmarshal(obj[k], &v) == nil && !strings.ContainsAny(v, ", :"):
			default:
				return nil, fmt.Errorf("%q is %s: want a number of milliseconds", k, obj[k])
			}
			parts = append(parts, k+":"+v)
		}
		text = strings.Join(parts, ",")
	case json.Unmarshal(raw, &list) == nil:
		text = strings.Join(list, ",")
	case json.Unmarshal(raw, &text) == nil:
	default:
		return nil, fmt.Errorf("%s: want an object {\"ttft\": MS, ...}, a list [\"ttft:MS\", ...] or a string \"ttft:MS ...\"", raw)
	}
	if t := strings.TrimSpace(text); t == "" || t == "none" {
		return nil, nil
	}
	o, err := ParseSLO(text)
	if err != nil {
		return nil, err
	}
	return &o, nil
}
