package compare

import (
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
	// A stream whose record has no TTFT is not stood in for.
	log2 := `{"time":"2026-12-03T10:00:00.000000Z","tenant":"acme","model":"m","route":"chat","stream":true,"outcome":"ok","isl":5,"osl":3,"ttft_ms":null,"e2e_ms":120,"tpot_ms":20,"itl_ms":null}
`
	s2, err := ReadRequestLog("log", strings.NewReader(log2), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if a := s2.attainment(SLO{TTFT: 500}, false); a.Low != 0 || a.Why == "" {
		t.Errorf("a stream without TTFT: attainment %+v, want 0 with a reason", a)
	}
}
