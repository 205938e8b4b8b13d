package sweep

import (
	"math"
	"strings"
	"testing"
)

// curve makes steps of kind k at loads x with goodput g (request_goodput)
// and attainment a (nil: 100% everywhere).
func curve(k Kind, x, g, a []float64) []Step {
	steps := make([]Step, len(x))
	for i := range x {
		att := 1.0
		if a != nil {
			att = a[i]
		}
		steps[i] = Step{
			Kind: k, Load: Load(x[i]), Completed: 100, RequestThroughput: g[i] * 1.1,
			RequestGoodput: Num(g[i]), GoodOutputThroughput: Unknown, Good: int(att * 100), Attainment: Num(att),
			TTFT: Pct{Unknown, Unknown}, ITL: Pct{Unknown, Unknown}, TPOT: Pct{Unknown, Unknown}, E2EL: Pct{Unknown, Unknown},
		}
	}
	return steps
}

func TestFindKnee(t *testing.T) {
	doubling := []float64{1, 2, 4, 8, 16}
	linear := []float64{1, 2, 3, 4, 5, 6, 7, 8}
	obj := Rule{Objective: 0.99}
	cases := []struct {
		name    string
		steps   []Step
		rule    Rule
		want    int // knee index, -1: none
		reasons []string
	}{
		{"monotone proportional: never kneeing", curve(RequestRate, doubling, []float64{1, 2, 4, 8, 16}, nil), obj, -1, nil},
		{"sharp knee then plateau", curve(RequestRate, doubling, []float64{1, 2, 4, 6, 6.1}, nil), obj, 4, []string{ReasonFlat}},
		{"flat from the start", curve(RequestRate, doubling[:4], []float64{5, 5, 5, 5}, nil), obj, 1, []string{ReasonFlat}},
		{"noisy dip below the knee is not the knee", curve(RequestRate, linear, []float64{1, 2.1, 1.9, 4.1, 5, 5.9, 6.1, 5.8}, nil), obj, 6, []string{ReasonFlat}},
		{"noisy plateau", curve(RequestRate, []float64{1, 2, 4, 8, 16, 32}, []float64{1, 2, 4, 7.9, 8.2, 7.8}, nil), obj, 4, []string{ReasonFlat}},
		{"goodput falls past the knee", curve(RequestRate, doubling, []float64{1, 2, 3.9, 2, 0.5}, nil), obj, 3, []string{ReasonFlat}},
		{"attainment falls below the objective while goodput rises", curve(RequestRate, doubling[:4], []float64{1, 2, 4, 8}, []float64{1, 1, 0.995, 0.95}), obj, 3, []string{ReasonAttainment}},
		{"both at once", curve(RequestRate, doubling, []float64{1, 2, 4, 4.1, 4}, []float64{1, 1, 1, 0.9, 0.5}), obj, 3, []string{ReasonFlat, ReasonAttainment}},
		{"objective missed at the first step", curve(RequestRate, doubling[:3], []float64{1, 2, 4}, []float64{0.5, 0.5, 0.5}), obj, 0, []string{ReasonAttainment}},
		{"objective 0: attainment not checked", curve(RequestRate, doubling[:3], []float64{1, 2, 4}, []float64{0.5, 0.5, 0.5}), Rule{}, -1, nil},
		{"inf counts as twice the step before", curve(RequestRate, []float64{1, 2, 4, math.Inf(1)}, []float64{1, 2, 4, 4.1}, nil), obj, 3, []string{ReasonFlat}},
		{"inf still rising", curve(RequestRate, []float64{1, 2, 4, math.Inf(1)}, []float64{1, 2, 4, 7}, nil), obj, -1, nil},
		{"no goodput at all", curve(MaxConcurrency, doubling[:3], []float64{0, 0, 0}, nil), Rule{}, 1, []string{ReasonFlat}},
		{"goodput appears after zero", curve(MaxConcurrency, doubling[:3], []float64{0, 1, 2}, nil), Rule{}, -1, nil},
		{"slow bend keeps rising (gain 0.34 of the load's growth)", curve(Concurrency, []float64{32, 64, 128, 256}, []float64{10, 17.2, 26.4, 35.4}, nil), obj, -1, nil},
		{"a later rise means the dip was noise", curve(RequestRate, doubling, []float64{1, 2, 2.05, 4, 8}, nil), obj, -1, nil},
		{"single step", curve(RequestRate, []float64{4}, []float64{4}, nil), obj, -1, nil},
		{"no steps", nil, obj, -1, nil},
		{"closed loop: knee at max concurrency", curve(Concurrency, []float64{1, 2, 4, 8, 16, 32, 64}, []float64{1, 2, 3.9, 7.6, 14.5, 26, 26.3}, nil), obj, 6, []string{ReasonFlat}},
		{"MinGain 0.5 is stricter", curve(Concurrency, []float64{32, 64, 128, 256}, []float64{10, 17.2, 26.4, 35.4}, nil), Rule{MinGain: 0.5}, 3, []string{ReasonFlat}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := FindKnee(tc.steps, tc.rule)
			if k.Index != tc.want || k.Found != (tc.want >= 0) {
				t.Fatalf("knee %d (found %v), want %d; note: %s", k.Index, k.Found, tc.want, k.Note)
			}
			if strings.Join(k.Reasons, ",") != strings.Join(tc.reasons, ",") {
				t.Errorf("reasons %v, want %v", k.Reasons, tc.reasons)
			}
			if k.Note == "" {
				t.Error("no note")
			}
			if tc.want < 0 {
				if !math.IsNaN(float64(k.Load)) || k.Sustained != -1 {
					t.Errorf("no knee: load %v sustained %d, want NaN and -1", k.Load, k.Sustained)
				}
				return
			}
			if k.Load != tc.steps[tc.want].Load || k.Sustained != tc.want-1 {
				t.Errorf("load %v sustained %d, want %v and %d", k.Load, k.Sustained, tc.steps[tc.want].Load, tc.want-1)
			}
			if !strings.Contains(k.Note, "knee at "+string(tc.steps[tc.want].Kind)+" "+fmtLoad(tc.steps[tc.want].Kind, tc.steps[tc.want].Load)) {
				t.Errorf("note %q does not name the knee's load", k.Note)
			}
		})
	}
}

// Without an SLO the knee follows request throughput: every successful
// request is good.
func TestFindKneeWithoutSLOFollowsThroughput(t *testing.T) {
	steps := curve(RequestRate, []float64{1, 2, 4, 8}, []float64{0, 0, 0, 0}, nil)
	for i, thr := range []float64{1, 2, 4, 4.2} {
		steps[i].RequestGoodput = Unknown
		steps[i].RequestThroughput = thr
	}
	if k := FindKnee(steps, Rule{}); k.Index != 3 {
		t.Fatalf("knee %d, want 3 (%s)", k.Index, k.Note)
	}
	steps[3].RequestThroughput = 8
	if k := FindKnee(steps, Rule{}); k.Found {
		t.Fatalf("knee %d on a rising throughput (%s)", k.Index, k.Note)
	}
}

// The threshold is MinGain times the load's growth since the best step:
// just above it rises, at it does not.
func TestFindKneeThreshold(t *testing.T) {
	// From 4 at load 4 to load 8 (+100%): the bound is 4·(1+0.25) = 5.
	for _, tc := range []struct {
		g    float64
		knee bool
	}{{5, true}, {5.01, false}, {4.99, true}} {
		k := FindKnee(curve(RequestRate, []float64{2, 4, 8}, []float64{2, 4, tc.g}, nil), Rule{})
		if k.Found != tc.knee {
			t.Errorf("goodput %v at +100%% load: knee %v, want %v (%s)", tc.g, k.Found, tc.knee, k.Note)
		}
	}
}

func TestParseLadder(t *testing.T) {
	good := []struct {
		in   string
		kind Kind
		vals []float64
		str  string
	}{
		{"request-rate=1,2,4,8,16", RequestRate, []float64{1, 2, 4, 8, 16}, "request-rate=1,2,4,8,16"},
		{" request-rate = 0.5, 1.5 ,inf", RequestRate, []float64{0.5, 1.5, math.Inf(1)}, "request-rate=0.5,1.5,inf"},
		{"max-concurrency=1,2,4", MaxConcurrency, []float64{1, 2, 4}, "max-concurrency=1,2,4"},
		{"Concurrency=8", Concurrency, []float64{8}, "concurrency=8"},
	}
	for _, tc := range good {
		l, err := ParseLadder(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if l.Kind != tc.kind || len(l.Values) != len(tc.vals) || l.String() != tc.str {
			t.Errorf("%q: %v, want %s", tc.in, l, tc.str)
			continue
		}
		for i, v := range tc.vals {
			if float64(l.Values[i]) != v {
				t.Errorf("%q: value %d is %v, want %v", tc.in, i, l.Values[i], v)
			}
		}
	}
	bad := map[string]string{
		"":                           "KIND=",
		"1,2,4":                      "KIND=",
		"rate=1,2":                   "unknown kind",
		"request-rate=":              "empty value",
		"request-rate=1,,2":          "empty value",
		"request-rate=1,0":           "positive",
		"request-rate=-1":            "positive",
		"request-rate=nan":           "positive",
		"request-rate=2,1":           "increase",
		"request-rate=1,1":           "increase",
		"request-rate=inf,inf":       "increase",
		"max-concurrency=1.5":        "whole number",
		"max-concurrency=0":          "whole number",
		"concurrency=inf":            "whole number",
		"request-rate=" + many(65):   "at most 64",
		"max-concurrency=4,2,8,16":   "increase",
		"request-rate=1e400":         "positive",
		"max-concurrency=1;rm -rf /": "whole number",
	}
	for in, want := range bad {
		if _, err := ParseLadder(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one saying %q", in, err, want)
		}
	}
}

func many(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if i > 1 {
			b.WriteByte(',')
		}
		b.WriteString(Load(i).String())
	}
	return b.String()
}

// One step (a sweep stopped after it) says no knee can be found by goodput
// in it, not that goodput still rises (a probe).
func TestFindKneeOneStep(t *testing.T) {
	k := FindKnee(curve(RequestRate, []float64{4}, []float64{3.9}, nil), Rule{})
	if k.Found || strings.Contains(k.Note, "still rises") || !strings.Contains(k.Note, "no knee in one step (request-rate 4 req/s): a knee by goodput needs two") {
		t.Fatalf("found %v: %q", k.Found, k.Note)
	}
	if k := FindKnee(curve(RequestRate, []float64{4}, []float64{3.9}, []float64{0.5}), Rule{Objective: 0.99}); !k.Found || k.Index != 0 {
		t.Fatalf("one step under the objective: found %v at %d (%q)", k.Found, k.Index, k.Note)
	}
}
