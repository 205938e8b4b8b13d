package slo

import (
	"errors"
	"fmt"
)

// Shape is a shape of work (docs/MEASURES.md, Workload shape).
//
// A single request is one of chat, rag or longgen (or unknown when its ISL or
// OSL is not known); "mixed" describes traffic, not a request: a tenant's
// traffic is mixed when no single shape reaches ShapeThresholds.DominantShare
// of its requests (see ShapeThresholds.traffic).
type Shape uint8

const (
	shapeUnknown Shape = iota // ISL or OSL unknown (errors, rejections, no usage)
	shapeChat                 // medium ISL, medium OSL: everything that is neither rag nor longgen
	shapeRAG                  // long ISL, short OSL
	shapeLongGen              // short ISL, long OSL
	shapeMixed                // traffic-level only: no dominant shape
	numShapes
)

// shapeCounts counts requests per shape, indexed by Shape.
type shapeCounts [numShapes]uint64

var shapeNames = [numShapes]string{"unknown", "chat", "rag", "longgen", "mixed"}

// String returns the shape's name as written in configuration and JSON.
func (s Shape) String() string {
	if s < numShapes {
		return shapeNames[s]
	}
	return "unknown"
}

// CheckShape reports why name is not a shape a tenant's slo_by_shape may
// name (chat, rag or longgen), or nil: the configuration's checks ask it,
// so that a file the judge would refuse is refused where it is checked.
func CheckShape(name string) error {
	_, err := parseShape(name)
	return err
}

// parseShape parses a per-request shape name: chat, rag or longgen. "mixed"
// is rejected because it describes traffic, never a single request.
func parseShape(s string) (Shape, error) {
	switch s {
	case "chat":
		return shapeChat, nil
	case "rag":
		return shapeRAG, nil
	case "longgen":
		return shapeLongGen, nil
	case "mixed":
		return shapeUnknown, errors.New(`"mixed" describes a tenant's traffic, not a request; override chat, rag or longgen`)
	}
	return shapeUnknown, fmt.Errorf("unknown shape %q (want chat, rag or longgen)", s)
}

// Default shape thresholds. They follow common benchmark shapes: RAG sends a
// long context and reads a short answer; long generation sends a short prompt
// and reads a long output; chat is the rest.
const (
	defaultRAGMinISL     = 2048
	defaultRAGMaxOSL     = 256
	defaultLongGenMaxISL = 1024
	defaultLongGenMinOSL = 1024
	defaultDominantShare = 0.8
)

// ShapeThresholds classifies requests by ISL and OSL (in tokens). A zero
// field takes its default (the Default* constants).
//
//   - rag:     ISL ≥ RAGMinISL and OSL ≤ RAGMaxOSL
//   - longgen: ISL ≤ LongGenMaxISL and OSL ≥ LongGenMinOSL
//   - chat:    everything else with a known ISL and OSL
type ShapeThresholds struct {
	// RAGMinISL: a rag request has at least this many prompt tokens.
	// Zero: 2048.
	RAGMinISL int `yaml:"rag_min_isl,omitempty" json:"rag_min_isl"`
	// RAGMaxOSL: a rag request generates at most this many tokens. Zero: 256.
	RAGMaxOSL int `yaml:"rag_max_osl,omitempty" json:"rag_max_osl"`
	// LongGenMaxISL: a longgen request has at most this many prompt tokens.
	// Zero: 1024.
	LongGenMaxISL int `yaml:"longgen_max_isl,omitempty" json:"longgen_max_isl"`
	// LongGenMinOSL: a longgen request generates at least this many tokens.
	// Zero: 1024.
	LongGenMinOSL int `yaml:"longgen_min_osl,omitempty" json:"longgen_min_osl"`
	// DominantShare: traffic whose most common shape has at least this share
	// of the classified requests has that shape; below it, the traffic is
	// mixed. In (0, 1]. Zero: 0.8.
	DominantShare float64 `yaml:"dominant_share,omitempty" json:"dominant_share"`
}

// withDefaults returns t with every zero field set to its default.
func (t ShapeThresholds) withDefaults() ShapeThresholds {
	if t.RAGMinISL == 0 {
		t.RAGMinISL = defaultRAGMinISL
	}
	if t.RAGMaxOSL == 0 {
		t.RAGMaxOSL = defaultRAGMaxOSL
	}
	if t.LongGenMaxISL == 0 {
		t.LongGenMaxISL = defaultLongGenMaxISL
	}
	if t.LongGenMinOSL == 0 {
		t.LongGenMinOSL = defaultLongGenMinOSL
	}
	if t.DominantShare == 0 {
		t.DominantShare = defaultDominantShare
	}
	return t
}

// validate checks the thresholds (after defaults). path prefixes messages.
func (t ShapeThresholds) validate(path string) error {
	d := t.withDefaults()
	p := func(f string) string {
		if path == "" {
			return f
		}
		return path + "." + f
	}
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"rag_min_isl", t.RAGMinISL}, {"rag_max_osl", t.RAGMaxOSL}, {"longgen_max_isl", t.LongGenMaxISL}, {"longgen_min_osl", t.LongGenMinOSL}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0 (or left out for the default)", p(f.name)))
		}
	}
	if !(d.DominantShare > 0 && d.DominantShare <= 1) {
		errs = append(errs, fmt.Errorf("%s: must be in (0, 1], got %v", p("dominant_share"), t.DominantShare))
	}
	if len(errs) == 0 && d.RAGMinISL <= d.LongGenMaxISL && d.RAGMaxOSL >= d.LongGenMinOSL {
		errs = append(errs, fmt.Errorf("%s: rag and longgen overlap: need rag_min_isl (%d) > longgen_max_isl (%d) or rag_max_osl (%d) < longgen_min_osl (%d)",
			p("rag_min_isl"), d.RAGMinISL, d.LongGenMaxISL, d.RAGMaxOSL, d.LongGenMinOSL))
	}
	return errors.Join(errs...)
}

// classify returns the shape of one request from its ISL and OSL (tokens):
// rag, longgen or chat, or unknown when either count is negative (unknown).
// Zero thresholds take their defaults.
func (t ShapeThresholds) classify(isl, osl int) Shape {
	if isl < 0 || osl < 0 {
		return shapeUnknown
	}
	t = t.withDefaults()
	switch {
	case isl >= t.RAGMinISL && osl <= t.RAGMaxOSL:
		return shapeRAG
	case isl <= t.LongGenMaxISL && osl >= t.LongGenMinOSL:
		return shapeLongGen
	}
	return shapeChat
}

// traffic returns the shape of traffic given the request count per shape
// (unknown and mixed entries are ignored): the most common
// of chat, rag and longgen when its share is at least DominantShare, else
// shapeMixed; shapeUnknown when no request was classified.
func (t ShapeThresholds) traffic(counts shapeCounts) Shape {
	t = t.withDefaults()
	var total uint64
	best := shapeUnknown
	for _, s := range [...]Shape{shapeChat, shapeRAG, shapeLongGen} {
		total += counts[s]
		if best == shapeUnknown || counts[s] > counts[best] {
			best = s
		}
	}
	if total == 0 {
		return shapeUnknown
	}
	if float64(counts[best]) >= t.DominantShare*float64(total) {
		return best
	}
	return shapeMixed
}
