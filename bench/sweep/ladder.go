package sweep

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/goodput/goodput/bench"
	"math"
	"strconv"
	"strings"
)

// Kind is what a sweep varies from step to step.
type Kind string

// The kinds of load a sweep can vary. They follow the bench flags of the
// same names.
const (
	// RequestRate is the open loop's mean request rate (requests/s; inf:
	// every request at once), vLLM's --request-rate.
	RequestRate Kind = "request-rate"
	// MaxConcurrency is the open loop's cap on requests in flight, vLLM's
	// --max-concurrency (with --request-rate inf, the default, this is N
	// clients sending back to back).
	MaxConcurrency Kind = "max-concurrency"
	// Concurrency is the closed loop's number of clients, goodput bench's
	// --concurrency.
	Concurrency Kind = "concurrency"
)

// Unit is the unit of the kind's load values.
func (k Kind) Unit() string {
	if k == RequestRate {
		return "req/s"
	}
	return "requests in flight"
}

// Load is one step's load value. It writes +Inf as vLLM writes a request
// rate of inf: the string "inf".
type Load float64

// MarshalJSON writes a number, or "inf".
func (l Load) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(l), 1) {
		return []byte(`"inf"`), nil
	}
	if math.IsNaN(float64(l)) || math.IsInf(float64(l), 0) {
		return []byte(`null`), nil
	}
	return json.Marshal(float64(l))
}

// UnmarshalJSON reads a number or "inf".
func (l *Load) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return fmt.Errorf("load %q: not a number", s)
		}
		*l = Load(v)
		return nil
	}
	if string(b) == "null" {
		*l = Load(math.NaN())
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*l = Load(v)
	return nil
}

// String prints the load: up to 4 significant digits, or "inf".
func (l Load) String() string {
	v := float64(l)
	if math.IsInf(v, 1) {
		return "inf"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// Ladder is a sweep's steps: the kind of load and its values, strictly
// increasing.
type Ladder struct {
	Kind   Kind
	Values []Load
}

// String is the ladder as --sweep takes it: "request-rate=1,2,4".
func (l Ladder) String() string {
	vs := make([]string, len(l.Values))
	for i, v := range l.Values {
		vs[i] = v.String()
	}
	return string(l.Kind) + "=" + strings.Join(vs, ",")
}

// maxSteps bounds a ladder: a sweep is a handful of steps, and a typo
// (a range pasted twice) should not start an hour of load.
const maxSteps = 64

// ParseLadder reads --sweep: KIND=V1,V2,… with KIND request-rate (positive
// numbers; the last may be inf), max-concurrency or concurrency (whole
// numbers ≥ 1). The values must increase strictly: the knee rule reads the
// steps in order of load.
func ParseLadder(s string) (Ladder, error) {
	k, vals, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return Ladder{}, fmt.Errorf("%q: want KIND=V1,V2,… with KIND %s, %s or %s", s, RequestRate, MaxConcurrency, Concurrency)
	}
	l := Ladder{Kind: Kind(strings.ToLower(strings.TrimSpace(k)))}
	switch l.Kind {
	case RequestRate, MaxConcurrency, Concurrency:
	default:
		return Ladder{}, fmt.Errorf("%q: unknown kind %q (want %s, %s or %s)", s, k, RequestRate, MaxConcurrency, Concurrency)
	}
	items := strings.Split(vals, ",")
	if len(items) > maxSteps {
		return Ladder{}, fmt.Errorf("%d steps: at most %d", len(items), maxSteps)
	}
	for _, it := range items {
		it = strings.TrimSpace(it)
		if it == "" {
			return Ladder{}, fmt.Errorf("%q: an empty value", s)
		}
		v, err := parseLoad(l.Kind, it)
		if err != nil {
			return Ladder{}, err
		}
		if n := len(l.Values); n > 0 && !(v > l.Values[n-1]) {
			return Ladder{}, fmt.Errorf("%s after %s: the values must increase", v, l.Values[n-1])
		}
		l.Values = append(l.Values, v)
	}
	return l, nil
}

func parseLoad(k Kind, s string) (Load, error) {
	if k == RequestRate {
		switch strings.ToLower(s) {
		case "inf", "+inf", "infinity":
			return Load(math.Inf(1)), nil
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v >= bench.MinRate) || !(v <= bench.MaxRate) {
			return 0, fmt.Errorf("%s %q: want a positive number of requests per second from %g to %g, or inf", k, s, bench.MinRate, bench.MaxRate)
		}
		return Load(v), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s %q: want a whole number of at least 1", k, s)
	}
	return Load(n), nil
}

// errNoSteps is returned for a sweep without steps.
var errNoSteps = errors.New("no steps")
