package slo

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/keyshape"
	"go.yaml.in/yaml/v3"
)

// Config is the SLO part of the gateway configuration:
//
//	slos:
//	  interactive: {ttft: 500ms, tpot: 50ms, e2e: 60s, objective: 0.99}
//	  reader:      {deadline: {ttft: 1s, pace: 60ms}, objective: 0.95}
//	  batch:       {e2e: 300s, objective: 0.9}
//	  smooth:      {itl: {max: 100ms, allowed_fraction: 0.01}, objective: 0.99}
//	shapes:
//	  rag_min_isl: 2048
//
// The zero Config has no classes and the default shape thresholds.
type Config struct {
	// SLOs maps a class name to its class. Tenants name a class by this key.
	// Nil or empty: no classes are defined.
	SLOs map[string]*Class `yaml:"slos"`
	// Shapes holds the ISL/OSL thresholds of the shapes of work
	// (docs/MEASURES.md, Workload shape).
	// Zero fields take the defaults documented on ShapeThresholds.
	Shapes ShapeThresholds `yaml:"shapes"`
}

// Validate checks every class and the shape thresholds. The error names each
// offending field by its path, e.g. "slos.reader.deadline.pace: must be > 0";
// all problems are reported, joined.
func (c *Config) Validate() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c.SLOs)) {
		path := "slos." + name
		if keyshape.Holds([]byte(name)) {
			// A key pasted as a class name: class names are label
			// values of the metrics, and in the admin API and every
			// judged record. Not quoted, nor in the path.
			errs = append(errs, errors.New("slos: a class name shaped like a gateway key (gp- and 16 or more of its characters), and class names are written to the metrics, the admin API and the request log: give it a name instead (not shown here)"))
			continue
		}
		if !validName.MatchString(name) {
			errs = append(errs, fmt.Errorf("%s: class name must match %s (it becomes a metric label value)", path, validName))
			continue
		}
		cl := c.SLOs[name]
		if cl == nil {
			errs = append(errs, fmt.Errorf("%s: empty class: set an objective and at least the thresholds it promises", path))
			continue
		}
		if err := cl.validate(path); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Shapes.validate("shapes"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

var validName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// Class is one SLO class: latency thresholds and an objective
// (docs/MEASURES.md, SLOs). A request is good when its outcome is ok and every threshold set here holds
// (inclusive ≤). A zero threshold means "no bound" (in YAML: leave the field
// out; an explicit 0 is rejected by Validate as almost certainly a mistake).
type Class struct {
	// TTFT bounds the time to the first token event. Zero: no bound.
	TTFT cfgtypes.Duration `yaml:"ttft,omitempty"`
	// TPOT bounds the time per output token after the first,
	// (E2E − TTFT)/(OSL − 1). An undefined TPOT (OSL ≤ 1) counts as 0.
	// Zero: no bound.
	TPOT cfgtypes.Duration `yaml:"tpot,omitempty"`
	// ITL bounds single inter-token gaps, allowing a fraction of them over
	// the bound. Nil: no bound.
	ITL *ITLBound `yaml:"itl,omitempty"`
	// Deadline is a TTFT plus a per-token pace: token i is due at
	// TTFT + (i−1)·Pace (docs/MEASURES.md, Latencies). Nil: no deadline.
	Deadline *Deadline `yaml:"deadline,omitempty"`
	// E2E bounds the time to the last token event. Zero: no bound.
	E2E cfgtypes.Duration `yaml:"e2e,omitempty"`
	// Objective is the target fraction of good requests, in (0, 1), for
	// example 0.99. The error budget is 1 − Objective. Required.
	Objective float64 `yaml:"objective"`
	// CountClientErrors judges requests refused for the client's own
	// mistake (an engine or gateway 4xx other than 408 and 429: bad JSON,
	// unknown model, body too large) as misses for reason error. False, the
	// default: they are logged and counted in goodput_requests_total but not
	// judged, as availability SLIs usually treat them.
	CountClientErrors bool `yaml:"count_client_errors,omitempty"`

	set uint8 // which optional fields the YAML named, to reject explicit zeros
}

const (
	setTTFT uint8 = 1 << iota
	setTPOT
	setE2E
	setObjective
)

// ITLBound is the `itl` threshold: at most AllowedFraction of a request's
// inter-token gaps may exceed Max.
//
// Gaps are the per-event gaps the meter records (as vLLM's benchmark does),
// not a per-token view: an event that carries several tokens after a long
// gap is a visible stall to the reader.
type ITLBound struct {
	// Max is the per-gap bound (a gap equal to Max holds). Required, > 0.
	Max cfgtypes.Duration `yaml:"max"`
	// AllowedFraction is the fraction of gaps that may exceed Max, in
	// [0, 1). Zero (the default): no gap may exceed Max.
	AllowedFraction float64 `yaml:"allowed_fraction,omitempty"`
}

// Deadline is the `deadline` threshold (docs/MEASURES.md): with TTFT a and
// pace p, token i (1-based) is due at a + (i−1)·p. Early tokens bank slack, so
// delaying tokens to even out the stream can never help.
type Deadline struct {
	// TTFT is a, the due time of the first token. Required, > 0.
	TTFT cfgtypes.Duration `yaml:"ttft"`
	// Pace is p, the time allowed per further token. Required, > 0.
	Pace cfgtypes.Duration `yaml:"pace"`
}

// validate checks the class. path prefixes every message (for example
// "slos.reader"); it may be empty.
func (c *Class) validate(path string) error {
	p := func(field string) string {
		if path == "" {
			return field
		}
		return path + "." + field
	}
	var errs []error
	positive := func(field string, d cfgtypes.Duration, bit uint8) {
		if d < 0 || (d == 0 && c.set&bit != 0) {
			errs = append(errs, fmt.Errorf("%s: must be > 0 (leave the field out for no bound)", p(field)))
		}
	}
	positive("ttft", c.TTFT, setTTFT)
	positive("tpot", c.TPOT, setTPOT)
	positive("e2e", c.E2E, setE2E)
	if it := c.ITL; it != nil {
		if it.Max <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0", p("itl.max")))
		}
		if !(it.AllowedFraction >= 0 && it.AllowedFraction < 1) {
			errs = append(errs, fmt.Errorf("%s: must be in [0, 1), got %v", p("itl.allowed_fraction"), it.AllowedFraction))
		}
	}
	if d := c.Deadline; d != nil {
		if d.TTFT <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0", p("deadline.ttft")))
		}
		if d.Pace <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0", p("deadline.pace")))
		}
	}
	switch {
	case c.Objective == 0 && c.set&setObjective == 0:
		errs = append(errs, fmt.Errorf("%s: required, a fraction in (0, 1) such as 0.99", p("objective")))
	case !(c.Objective > 0 && c.Objective < 1):
		errs = append(errs, fmt.Errorf("%s: must be in (0, 1), got %v", p("objective"), c.Objective))
	case ErrorBudget(c.Objective) == 0:
		// Its error budget, taken to 12 decimals, would be none: every
		// burn rate undefined in the admin API and the report, where the
		// recording rules, dividing by 0, make it +Inf.
		errs = append(errs, fmt.Errorf("%s: must leave an error budget: 1 − objective is taken to 12 decimals, and %v leaves none", p("objective"), c.Objective))
	}
	return errors.Join(errs...)
}

// String describes the class in the configuration's own terms, e.g.
// "ttft≤500ms tpot≤50ms objective=0.99".
func (c *Class) String() string {
	var parts []string
	if c.TTFT > 0 {
		parts = append(parts, "ttft≤"+c.TTFT.String())
	}
	if c.TPOT > 0 {
		parts = append(parts, "tpot≤"+c.TPOT.String())
	}
	if c.ITL != nil {
		parts = append(parts, fmt.Sprintf("itl≤%s(allow %g)", c.ITL.Max, c.ITL.AllowedFraction))
	}
	if c.Deadline != nil {
		parts = append(parts, fmt.Sprintf("deadline(ttft %s, pace %s)", c.Deadline.TTFT, c.Deadline.Pace))
	}
	if c.E2E > 0 {
		parts = append(parts, "e2e≤"+c.E2E.String())
	}
	parts = append(parts, fmt.Sprintf("objective=%g", c.Objective))
	if c.CountClientErrors {
		parts = append(parts, "count_client_errors")
	}
	return strings.Join(parts, " ")
}

// UnmarshalYAML decodes a class, rejecting unknown fields (a typo such as
// "tfft" would otherwise silently drop a promise) and remembering which
// fields were written so that Validate can reject an explicit 0.
func (c *Class) UnmarshalYAML(n *yaml.Node) error {
	keys, err := mappingKeys(n, "an SLO class such as {ttft: 500ms, objective: 0.99}",
		"ttft", "tpot", "itl", "deadline", "e2e", "objective", "count_client_errors")
	if err != nil {
		return err
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if v := n.Content[i+1]; n.Content[i].Value == "count_client_errors" && (v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool") {
			return &cfgtypes.ValueError{Line: v.Line, Column: v.Column, Msg: fmt.Sprintf("want true or false, got %q", v.Value)}
		}
	}
	type plain Class
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*c = Class(p)
	c.set = 0
	for k, bit := range map[string]uint8{"ttft": setTTFT, "tpot": setTPOT, "e2e": setE2E, "objective": setObjective} {
		if keys[k] {
			c.set |= bit
		}
	}
	return nil
}

// UnmarshalYAML decodes the itl bound, rejecting unknown fields.
func (b *ITLBound) UnmarshalYAML(n *yaml.Node) error {
	if _, err := mappingKeys(n, "an itl bound such as {max: 100ms, allowed_fraction: 0.01}", "max", "allowed_fraction"); err != nil {
		return err
	}
	type plain ITLBound
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*b = ITLBound(p)
	return nil
}

// UnmarshalYAML decodes the deadline, rejecting unknown fields.
func (d *Deadline) UnmarshalYAML(n *yaml.Node) error {
	if _, err := mappingKeys(n, "a deadline such as {ttft: 1s, pace: 60ms}", "ttft", "pace"); err != nil {
		return err
	}
	type plain Deadline
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*d = Deadline(p)
	return nil
}

// mappingKeys checks that n is a mapping whose keys are all in known, and
// returns the keys present.
func mappingKeys(n *yaml.Node, want string, known ...string) (map[string]bool, error) {
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: want %s", n.Line, want)
	}
	keys := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if cfgtypes.IsMerge(k) {
			return nil, fmt.Errorf("line %d: a YAML merge key (<<) is not supported in an SLO class: write the fields out (an alias, *name, of the whole class is)", k.Line)
		}
		ok := false
		for _, kn := range known {
			if k.Value == kn {
				ok = true
				break
			}
		}
		if !ok {
			return nil, fmt.Errorf("line %d: unknown field %q (known: %s)", k.Line, k.Value, strings.Join(known, ", "))
		}
		keys[k.Value] = true
	}
	return keys, nil
}

// dur converts a configured duration for comparisons with record fields.
func dur(d cfgtypes.Duration) time.Duration { return time.Duration(d) }

// objectiveOf returns the objective of the named class, NaN when unknown.
func objectiveOf(classes map[string]*Class, name string) float64 {
	if c := classes[name]; c != nil {
		return c.Objective
	}
	return math.NaN()
}

// ErrorBudget returns a class's error budget, 1 − objective
// (docs/MEASURES.md, SLOs), rounded to 12 decimals: objectives are written
// as decimals (0.9, 0.999), whose complement binary floating point misses
// (1 − 0.9 is 0.09999999999999998), and a window at exactly its objective
// must burn exactly 1, not 1.0000000000000002 (overspent).
func ErrorBudget(objective float64) float64 {
	return math.Round((1-objective)*1e12) / 1e12
}
