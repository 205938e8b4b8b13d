package slo

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// resolver picks a tenant's SLO class for a request. A tenant names one
// class and may override it per model and per shape of work; the most
// specific rule wins in this order:
//
//  1. the per-model override for the request's model: the name the request
//     gave, byte for byte, else the configured model its limits matched
//     it to (meter.Record.MatchedModel: an alias's model, a spelling
//     Ollama reads as the model, the tenant's default model for a request
//     that names none); for a request whose limits matched the LoRA
//     adapter its body names (meter.Record.MatchedByAdapter), that
//     adapter's model alone, which the engine runs whatever name the
//     request gave;
//  2. the per-shape override for the request's shape (chat, rag, longgen);
//  3. the tenant's class.
//
// The model override wins over the shape override because the model decides
// the achievable speed (a 70B model cannot promise an 8B model's TTFT whatever
// the shape). The matched model is tried because the engine runs that model
// whichever of its names the request gave, or none: judged by the name
// alone, one model's requests were judged by the class of their spelling,
// and those that named none (which the engine runs as the default model)
// by the tenant's class. A Resolver is immutable and safe for concurrent
// use; Resolve does not allocate.
type resolver struct {
	def    named
	models map[string]named
	shapes [numShapes]named
	// dflt marks the default_slo resolver, which judges the tenants the
	// configuration does not name.
	dflt bool
}

type named struct {
	name  string
	class *Class
}

// newResolver builds the resolver of one tenant. classes is the `slos:`
// section; class is the tenant's class name; byModel maps a model name to a
// class name and byShape maps a shape name (chat, rag, longgen) to a class
// name; either map may be nil. Classes are copied, so later changes to
// classes do not affect the resolver. The error names every unknown class or
// shape; the caller adds the tenant's configuration path.
func newResolver(classes map[string]*Class, class string, byModel, byShape map[string]string) (*resolver, error) {
	var errs []error
	lookup := func(where, name string) named {
		c := classes[name]
		if c == nil {
			errs = append(errs, fmt.Errorf("%s: unknown SLO class %q (known: %s)", where, name, knownClasses(classes)))
			return named{}
		}
		cp := *c
		return named{name: name, class: &cp}
	}
	r := &resolver{def: lookup("slo", class), models: make(map[string]named, len(byModel))}
	for _, m := range slices.Sorted(maps.Keys(byModel)) {
		r.models[m] = lookup(fmt.Sprintf("slo_by_model.%s", m), byModel[m])
	}
	for _, s := range slices.Sorted(maps.Keys(byShape)) {
		sh, err := parseShape(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("slo_by_shape.%s: %w", s, err))
			continue
		}
		r.shapes[sh] = lookup("slo_by_shape."+s, byShape[s])
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// resolve returns the class name and class for a request to model, which
// its limits matched to the configured model matched ("" for none), with
// the given shape (shapeUnknown, e.g. for a failed request without counts,
// skips the shape overrides). The returned class must not be modified.
func (r *resolver) resolve(model, matched string, shape Shape) (string, *Class) {
	if n, ok := r.models[model]; ok {
		return n.name, n.class
	}
	if matched != "" && matched != model {
		if n, ok := r.models[matched]; ok {
			return n.name, n.class
		}
	}
	if shape < numShapes && r.shapes[shape].class != nil {
		n := r.shapes[shape]
		return n.name, n.class
	}
	return r.def.name, r.def.class
}

// Default returns the tenant's own class name and class.
func (r *resolver) Default() (string, *Class) { return r.def.name, r.def.class }

// classes returns every class this resolver can return, by name: useful to
// export the objective gauge for each (tenant, class). The classes must not
// be modified.
func (r *resolver) classes() map[string]*Class {
	out := map[string]*Class{r.def.name: r.def.class}
	for _, n := range r.models {
		out[n.name] = n.class
	}
	for _, n := range r.shapes {
		if n.class != nil {
			out[n.name] = n.class
		}
	}
	return out
}

func knownClasses(classes map[string]*Class) string {
	if len(classes) == 0 {
		return "none defined"
	}
	return strings.Join(slices.Sorted(maps.Keys(classes)), ", ")
}
