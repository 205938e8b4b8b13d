package slo

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
	"go.yaml.in/yaml/v3"
)

const issueYAML = `
slos:
  interactive: {ttft: 500ms, tpot: 50ms, e2e: 60s, objective: 0.99}
  reader:      {deadline: {ttft: 1s, pace: 60ms}, objective: 0.95}
  batch:       {e2e: 300s, objective: 0.9}
  smooth:      {itl: {max: 100ms, allowed_fraction: 0.01}, objective: 0.99}
`

func parseConfig(t *testing.T, src string) (*Config, error) {
	t.Helper()
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return nil, err
	}
	return &c, nil
}

func TestConfigIssueYAML(t *testing.T) {
	c, err := parseConfig(t, issueYAML)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	in := c.SLOs["interactive"]
	if in.TTFT.D() != 500*ms || in.TPOT.D() != 50*ms || in.E2E.D() != time.Minute || in.Objective != 0.99 || in.ITL != nil || in.Deadline != nil {
		t.Fatalf("interactive = %+v", in)
	}
	r := c.SLOs["reader"]
	if r.Deadline == nil || r.Deadline.TTFT.D() != time.Second || r.Deadline.Pace.D() != 60*ms || r.TTFT != 0 || r.Objective != 0.95 {
		t.Fatalf("reader = %+v", r)
	}
	if b := c.SLOs["batch"]; b.E2E.D() != 300*time.Second || b.Objective != 0.9 || b.TTFT != 0 {
		t.Fatalf("batch = %+v", b)
	}
	if s := c.SLOs["smooth"]; s.ITL == nil || s.ITL.Max.D() != 100*ms || s.ITL.AllowedFraction != 0.01 {
		t.Fatalf("smooth = %+v", s)
	}
	if got := in.String(); got != "ttft≤500ms tpot≤50ms e2e≤1m0s objective=0.99" {
		t.Fatalf("String = %q", got)
	}
	if b := c.SLOs["batch"].errorBudget(); b < 0.0999 || b > 0.1001 {
		t.Fatalf("error budget %v", b)
	}
	// Default shape thresholds apply.
	if c.Shapes.withDefaults().RAGMinISL != defaultRAGMinISL {
		t.Fatal("shape defaults not applied")
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"pace zero", `slos: {reader: {deadline: {ttft: 1s, pace: 0s}, objective: 0.95}}`,
			"slos.reader.deadline.pace: must be > 0"},
		{"pace missing", `slos: {reader: {deadline: {ttft: 1s}, objective: 0.95}}`,
			"slos.reader.deadline.pace: must be > 0"},
		{"deadline ttft missing", `slos: {reader: {deadline: {pace: 60ms}, objective: 0.95}}`,
			"slos.reader.deadline.ttft: must be > 0"},
		{"objective one", `slos: {x: {ttft: 1s, objective: 1}}`, "slos.x.objective: must be in (0, 1), got 1"},
		{"objective zero", `slos: {x: {ttft: 1s, objective: 0}}`, "slos.x.objective: must be in (0, 1), got 0"},
		{"objective percent", `slos: {x: {ttft: 1s, objective: 99}}`, "slos.x.objective: must be in (0, 1), got 99"},
		{"objective of no budget", `slos: {x: {ttft: 1s, objective: 0.9999999999999}}`, "slos.x.objective: must leave an error budget"},
		{"objective missing", `slos: {x: {ttft: 1s}}`, "slos.x.objective: required"},
		{"explicit zero ttft", `slos: {x: {ttft: 0s, objective: 0.9}}`, "slos.x.ttft: must be > 0"},
		{"explicit zero tpot", `slos: {x: {tpot: 0ms, objective: 0.9}}`, "slos.x.tpot: must be > 0"},
		{"explicit zero e2e", `slos: {x: {e2e: 0s, objective: 0.9}}`, "slos.x.e2e: must be > 0"},
		{"itl max missing", `slos: {x: {itl: {allowed_fraction: 0.1}, objective: 0.9}}`, "slos.x.itl.max: must be > 0"},
		{"itl fraction one", `slos: {x: {itl: {max: 1s, allowed_fraction: 1}, objective: 0.9}}`, "slos.x.itl.allowed_fraction: must be in [0, 1)"},
		{"itl fraction negative", `slos: {x: {itl: {max: 1s, allowed_fraction: -0.1}, objective: 0.9}}`, "slos.x.itl.allowed_fraction: must be in [0, 1)"},
		{"empty class", `slos: {x: }`, "slos.x: empty class"},
		{"bad class name", `slos: {"a b": {ttft: 1s, objective: 0.9}}`, "slos.a b: class name must match"},
		{"shape thresholds overlap", `shapes: {rag_min_isl: 512, rag_max_osl: 2048}`, "shapes.rag_min_isl: rag and longgen overlap"},
		{"shape negative", `shapes: {longgen_min_osl: -1}`, "shapes.longgen_min_osl: must be > 0"},
		{"dominant share", `shapes: {dominant_share: 1.5}`, "shapes.dominant_share: must be in (0, 1]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(t, tc.yaml)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			err = c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	c, err := parseConfig(t, `slos: {a: {ttft: 0s, objective: 2}, b: {deadline: {ttft: 1s, pace: 0s}, objective: 0.9}}`)
	if err != nil {
		t.Fatal(err)
	}
	msg := c.Validate().Error()
	for _, want := range []string{"slos.a.ttft", "slos.a.objective", "slos.b.deadline.pace"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q missing from %q", want, msg)
		}
	}
}

func TestConfigRejectsUnknownFields(t *testing.T) {
	for _, src := range []string{
		`slos: {x: {tfft: 1s, objective: 0.9}}`,
		`slos: {x: {deadline: {ttft: 1s, pase: 60ms}, objective: 0.9}}`,
		`slos: {x: {itl: {max: 1s, fraction: 0.1}, objective: 0.9}}`,
		`slos: {x: [1, 2]}`,
		`slos: {x: {ttft: 500, objective: 0.9}}`, // a bare number is not a duration
	} {
		if _, err := parseConfig(t, src); err == nil {
			t.Errorf("accepted %s", src)
		}
	}
	_, err := parseConfig(t, `slos: {x: {tfft: 1s, objective: 0.9}}`)
	if !strings.Contains(err.Error(), `unknown field "tfft"`) {
		t.Fatalf("error should name the field: %v", err)
	}
}

func TestClassValidateGoConstructed(t *testing.T) {
	c := &Class{TTFT: d(time.Second), Objective: 0.9}
	if err := c.validate(""); err != nil {
		t.Fatal(err)
	}
	c = &Class{TTFT: d(time.Second)}
	if err := c.validate(""); err == nil || !strings.HasPrefix(err.Error(), "objective: required") {
		t.Fatalf("err = %v", err)
	}
}

func TestResolver(t *testing.T) {
	c, err := parseConfig(t, issueYAML)
	if err != nil {
		t.Fatal(err)
	}
	r, err := newResolver(c.SLOs, "interactive",
		map[string]string{"llama-70b": "batch", "big-fast": "reader"},
		map[string]string{"rag": "reader", "longgen": "batch"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		model, matched string // the request's name; the model its limits matched
		shape          Shape
		want           string
	}{
		{"llama-8b", "", shapeChat, "interactive"},
		{"llama-8b", "", shapeRAG, "reader"},
		{"llama-8b", "", shapeLongGen, "batch"},
		{"llama-8b", "", shapeUnknown, "interactive"},
		{"llama-70b", "", shapeRAG, "batch"}, // the model override wins
		{"llama-70b", "", shapeChat, "batch"},
		{"llama-70b", "llama-70b", shapeChat, "batch"},
		// Another name of llama-70b (an alias, an Ollama spelling), and
		// none (llama-70b the default model): the model's class.
		{"big", "llama-70b", shapeChat, "batch"},
		{"LLAMA-70B", "llama-70b", shapeRAG, "batch"},
		{"", "llama-70b", shapeChat, "batch"},
		// The name the request gave wins when it has an entry.
		{"big-fast", "llama-70b", shapeChat, "reader"},
		// A matched model without an entry: the shape, then the tenant.
		{"small", "llama-8b", shapeRAG, "reader"},
		{"", "llama-8b", shapeChat, "interactive"},
	}
	for _, tc := range cases {
		name, cl := r.resolve(tc.model, tc.matched, tc.shape)
		if name != tc.want || cl == nil || cl.Objective != c.SLOs[tc.want].Objective {
			t.Errorf("Resolve(%q, %q, %s) = %s, want %s", tc.model, tc.matched, tc.shape, name, tc.want)
		}
	}
	// The resolver copied the classes.
	c.SLOs["interactive"].Objective = 0.5
	if _, cl := r.resolve("x", "", shapeChat); cl.Objective != 0.99 {
		t.Fatal("resolver shares the caller's class")
	}
	got := slices.Sorted(maps.Keys(r.classes()))
	if strings.Join(got, ",") != "batch,interactive,reader" {
		t.Fatalf("Classes = %v", got)
	}
	if n, _ := r.Default(); n != "interactive" {
		t.Fatalf("Default = %s", n)
	}
	if n := testenv.AllocsPerRun(100, func() { r.resolve("llama-8b", "", shapeRAG) }); n != 0 {
		t.Fatalf("Resolve allocates %v", n)
	}
	if n := testenv.AllocsPerRun(100, func() { r.resolve("big", "llama-70b", shapeRAG) }); n != 0 {
		t.Fatalf("Resolve by the matched model allocates %v", n)
	}
}

func TestResolverErrors(t *testing.T) {
	c, _ := parseConfig(t, issueYAML)
	_, err := newResolver(c.SLOs, "fast", map[string]string{"m": "slow"}, map[string]string{"mixed": "batch", "chatty": "batch"})
	if err == nil {
		t.Fatal("accepted unknown classes")
	}
	for _, want := range []string{
		`slo: unknown SLO class "fast" (known: batch, interactive, reader, smooth)`,
		`slo_by_model.m: unknown SLO class "slow"`,
		`slo_by_shape.mixed: "mixed" describes a tenant's traffic`,
		`slo_by_shape.chatty: unknown shape "chatty"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q missing from %v", want, err)
		}
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		isl, osl int
		want     Shape
	}{
		{500, 300, shapeChat},
		{2048, 256, shapeRAG}, // both bounds inclusive
		{2047, 256, shapeChat},
		{2048, 257, shapeChat},
		{20000, 10, shapeRAG},
		{1024, 1024, shapeLongGen},
		{1025, 1024, shapeChat},
		{1024, 1023, shapeChat},
		{10, 8000, shapeLongGen},
		{8000, 4000, shapeChat}, // long and long: neither
		{0, 0, shapeChat},
		{-1, 10, shapeUnknown},
		{10, -1, shapeUnknown},
	}
	for _, tc := range cases {
		if got := (ShapeThresholds{}).classify(tc.isl, tc.osl); got != tc.want {
			t.Errorf("Classify(%d, %d) = %s, want %s", tc.isl, tc.osl, got, tc.want)
		}
	}
	th := ShapeThresholds{RAGMinISL: 100, RAGMaxOSL: 10}
	if got := th.classify(100, 10); got != shapeRAG {
		t.Errorf("configured thresholds ignored: %s", got)
	}
}

func TestTrafficShape(t *testing.T) {
	var th ShapeThresholds
	c := func(chat, rag, longgen, unknown uint64) shapeCounts {
		var s shapeCounts
		s[shapeChat], s[shapeRAG], s[shapeLongGen], s[shapeUnknown] = chat, rag, longgen, unknown
		return s
	}
	cases := []struct {
		counts shapeCounts
		want   Shape
	}{
		{c(80, 10, 10, 0), shapeChat}, // exactly 0.8: dominant
		{c(79, 11, 10, 0), shapeMixed},
		{c(0, 9, 1, 500), shapeRAG}, // unknown requests do not count
		{c(0, 0, 0, 7), shapeUnknown},
		{c(1, 1, 1, 0), shapeMixed},
	}
	for _, tc := range cases {
		if got := th.traffic(tc.counts); got != tc.want {
			t.Errorf("Traffic(%v) = %s, want %s", tc.counts, got, tc.want)
		}
	}
	if got := (ShapeThresholds{DominantShare: 0.5}).traffic(c(50, 50, 0, 0)); got != shapeChat {
		t.Errorf("dominant share 0.5, 50/50: %s", got)
	}
}

// errorBudget returns 1 − Objective.
func (c *Class) errorBudget() float64 { return 1 - c.Objective }

// A merge key (<<) in a class is refused as one, not as an unknown field
// "<<" whose list of known fields hid what was wrong; an alias of the
// whole class is read.
func TestConfigMergeKeyInAClassSaysSo(t *testing.T) {
	_, err := parseConfig(t, "slos:\n  a: &a {ttft: 1s, objective: 0.9}\n  b: {<<: *a, objective: 0.95}\n")
	if err == nil || !strings.Contains(err.Error(), "line 3: a YAML merge key (<<) is not supported") || strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("err %v, want the merge key named at line 3", err)
	}
	if _, err := parseConfig(t, "slos:\n  a: &a {ttft: 1s, objective: 0.9}\n  b: *a\n"); err != nil {
		t.Fatalf("an alias of a whole class: %v", err)
	}
}
