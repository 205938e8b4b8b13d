package compare

import (
	"strconv"
	"strings"
	"testing"
)

// A non-streamed ok response in a request log is judged as the gateway
// judged it: E2E in place of TTFT, and no TPOT to bound. Its TTFT stays
// out of the TTFT distribution (it has none), and a streamed response
// without a TTFT is still a miss.
func TestRequestLogJudgesNonStreamedAsTheGateway(t *testing.T) {
	log := `{"time":"2026-12-03T10:00:00.000000Z","tenant":"acme","model":"m","route":"chat","stream":true,"outcome":"ok","isl":5,"osl":3,"ttft_ms":80,"e2e_ms":120,"tpot_ms":20,"itl_ms":[20,20]}
{"time":"2026-12-03T10:00:01.000000Z","tenant":"acme","model":"m","route":"chat","stream":false,"outcome":"ok","isl":5,"osl":7,"ttft_ms":null,"e2e_ms":340,"tpot_ms":null,"itl_ms":null}
{"time":"2026-12-03T10:00:02.000000Z","tenant":"acme","model":"m","route":"chat","stream":false,"outcome":"ok","isl":5,"osl":7,"ttft_ms":null,"e2e_ms":900,"tpot_ms":null,"itl_ms":null}
`
	s, err := ReadRequestLog("log", strings.NewReader(log), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	a := s.attainment(SLO{TTFT: 500, TPOT: 50}, false)
	if a.Low != 2.0/3 || a.High != a.Low || a.Why != "" {
		t.Errorf("attainment %+v, want 2/3 exactly (the 900 ms body misses its TTFT), with nothing unknown", a)
	}
	if n := len(s.TTFT.Samples); n != 1 {
		t.Errorf("TTFT distribution of %d requests, want 1", n)
	}
	// A stream whose record has no first token event, ended by its
	// finish or [DONE] (an ok record), and one of a single token event
	// without a count: judged as the gateway judges them (slo's
	// firstToken and tpotOf), E2E standing in for TTFT and the TPOT
	// undefined, so 0. The gateway's own verdict in the log says the same.
	log2 := `{"time":"2026-12-03T10:00:00.000000Z","tenant":"acme","model":"m","route":"chat","stream":true,"outcome":"ok","isl":5,"osl":null,"ttft_ms":null,"e2e_ms":120,"tpot_ms":null,"itl_ms":null,"events":0}
{"time":"2026-12-03T10:00:01.000000Z","tenant":"acme","model":"m","route":"chat","stream":true,"outcome":"ok","isl":5,"osl":null,"ttft_ms":90,"e2e_ms":90,"tpot_ms":null,"itl_ms":[],"events":1}
{"time":"2026-12-03T10:00:02.000000Z","tenant":"acme","model":"m","route":"chat","stream":true,"outcome":"ok","isl":5,"osl":null,"ttft_ms":90,"e2e_ms":200,"tpot_ms":null,"itl_ms":[110],"events":2}
`
	s2, err := ReadRequestLog("log", strings.NewReader(log2), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	// The third has two token events and no count: its pace cannot be
	// shown, a miss, as at the gateway.
	if a := s2.attainment(SLO{TTFT: 500, TPOT: 50}, false); a.Low != 2.0/3 || !a.Exact() || !strings.Contains(a.Why, "1 requests lack a measure") {
		t.Errorf("streams without a first token or a pace: attainment %+v, want 2/3, the third lacking TPOT", a)
	}
	if a := s2.attainment(SLO{TTFT: 100}, false); a.Low != 2.0/3 {
		t.Errorf("E2E 120 ms standing in for a TTFT bound of 100: attainment %+v, want 2/3", a)
	}
}

// Failed requests count against attainment as the gateway judges them:
// every failure is a miss but one refused for the client's own mistake (a
// 4xx other than 408 and 429), one without a valid key, and a client that
// left before the engine answered without its wait breaking a bound.
func TestRequestLogFailuresAreMisses(t *testing.T) {
	line := func(outcome string, status int, ttft, e2e string) string {
		return `{"time":"2026-12-03T10:00:00.000000Z","tenant":"acme","model":"m","route":"chat","stream":true,"outcome":"` + outcome +
			`","status":` + strconv.Itoa(status) + `,"isl":5,"osl":3,"ttft_ms":` + ttft + `,"e2e_ms":` + e2e + `,"tpot_ms":20,"itl_ms":[20,20]}` + "\n"
	}
	log := line("ok", 200, "100", "140") + line("ok", 200, "100", "140") + line("ok", 200, "900", "940") +
		line("upstream_error", 502, "null", "30") + // a miss
		line("client_error", 400, "null", "5") + // the client's mistake
		line("client_error", 429, "null", "5") + // the engine's refusal: a miss
		line("rejected", 413, "null", "1") + // the client's mistake
		line("rejected", 503, "null", "1") + // a miss
		line("unauthorized", 401, "null", "1") + // no valid key
		line("client_abort", 200, "100", "300") + // left after the first byte: a miss
		line("client_abort", 499, "null", "50") + // left before the engine answered, in time
		line("client_abort", 499, "null", "800") + // left after a wait that broke the TTFT bound
		line("timeout", 504, "null", "60000") +
		line("rate_limited", 429, "null", "2")
	s, err := ReadRequestLog("log", strings.NewReader(log), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if a := s.attainment(SLO{TTFT: 500}, false); a.Low != 2.0/10 || !a.Exact() || !strings.Contains(a.Why, "7 failed requests") {
		t.Errorf("TTFT ≤ 500: attainment %+v, want 2 good of 3 completed and 7 failures that count", a)
	}
	// Without a TTFT or E2E bound, no wait breaks one: the late abort is
	// not counted either.
	if a := s.attainment(SLO{TPOT: 50}, false); a.Low != 3.0/9 || !a.Exact() {
		t.Errorf("TPOT ≤ 50: attainment %+v, want 3 good of 3 completed and 6 failures that count", a)
	}
}

// One failed request is said in the singular: "1 requests did not
// complete (...): they are left out".
func TestRequestLogOneFailureNote(t *testing.T) {
	log := `{"time":"2026-12-03T10:00:00.000000Z","tenant":"acme","model":"m","route":"chat","stream":true,"outcome":"ok","status":200,"isl":5,"osl":3,"ttft_ms":100,"e2e_ms":140,"tpot_ms":20,"itl_ms":[20,20]}` + "\n" +
		`{"time":"2026-12-03T10:00:01.000000Z","tenant":"acme","model":"m","route":"chat","stream":true,"outcome":"upstream_error","status":502,"isl":5,"osl":null,"ttft_ms":null,"e2e_ms":30}` + "\n"
	s, err := ReadRequestLog("log", strings.NewReader(log), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(s.Notes, "\n")
	if !strings.Contains(notes, "1 request did not complete (outcome other than ok): it is left out of every figure but arrivals, and counts as misses") || strings.Contains(notes, "1 requests") {
		t.Errorf("notes:\n%s", notes)
	}
}
