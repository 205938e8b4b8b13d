package cfgtypes

import (
	"math"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkWholeNumbers refuses, in the YAML document doc, a number
// with a fraction where the value decoded into target (a pointer to the
// structure the document is decoded into) is an integer field: the YAML
// decoder cuts a float into an integer without a word, so `rpm: 0.5` or
// `max_concurrency: 0.9` became 0, which is no limit at all, and
// `max_concurrency: 2.9` became 2. A float with no fraction (`1e3`) is a
// whole number, as the decoder reads it. The error is a *ValueError at
// the number (NameField names its key). Text that is not YAML is left for
// the decoder to refuse.
func checkWholeNumbers(doc *yaml.Node, target any) error {
	w := wholeWalk{seen: map[wholeSeen]bool{}}
	return w.walk(doc, reflect.TypeOf(target))
}

type wholeSeen struct {
	n *yaml.Node
	t reflect.Type
}

type wholeWalk struct {
	// seen are the aliased nodes walked, each once for a type: an
	// alias of an alias, nine deep, would otherwise be walked 9⁹ times.
	seen map[wholeSeen]bool
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

func (w *wholeWalk) walk(n *yaml.Node, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := w.walk(c, t); err != nil {
				return err
			}
		}
		return nil
	case yaml.AliasNode:
		if n.Alias == nil || w.seen[wholeSeen{n.Alias, t}] {
			return nil
		}
		w.seen[wholeSeen{n.Alias, t}] = true
		return w.walk(n.Alias, t)
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if reflect.PointerTo(t).Implements(unmarshalerType) || n.Kind != yaml.ScalarNode || n.ShortTag() != "!!float" {
			return nil // a type that reads itself (Duration), or what the decoder refuses
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f == math.Trunc(f) {
			return nil // the decoder refuses what is not a finite number
		}
		read := math.Trunc(f)
		if read == 0 {
			read = 0 // -0.5 is read as 0, not "-0"
		}
		return &ValueError{Line: n.Line, Column: n.Column, Msg: n.Value + " is not a whole number (it would be read as " + strconv.FormatFloat(read, 'f', -1, 64) + ")"}
	case reflect.Struct, reflect.Map:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if IsMerge(n.Content[i]) {
				if err := w.walkMerged(n.Content[i+1], t); err != nil {
					return err
				}
				continue
			}
			vt, ok := t, true
			if t.Kind() == reflect.Struct {
				vt, ok = fieldType(t, n.Content[i].Value)
			} else {
				vt = t.Elem()
			}
			if ok {
				if err := w.walk(n.Content[i+1], vt); err != nil {
					return err
				}
			}
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		for _, c := range n.Content {
			if err := w.walk(c, t.Elem()); err != nil {
				return err
			}
		}
	}
	return nil
}

// IsMerge reports a mapping's merge key (`<<`), whose value's pairs the
// decoder reads into the mapping as its own.
func IsMerge(k *yaml.Node) bool { return k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" }

// walkMerged walks the value of a merge key in a mapping decoded into t:
// a mapping, an alias of one, or a list of them, each read as part of the
// mapping. A key the mapping sets itself overrides the merged one, but a
// fraction there is refused all the same: where nothing overrides it, it
// is cut.
func (w *wholeWalk) walkMerged(v *yaml.Node, t reflect.Type) error {
	if v.Kind != yaml.SequenceNode {
		return w.walk(v, t)
	}
	for _, c := range v.Content {
		if err := w.walk(c, t); err != nil {
			return err
		}
	}
	return nil
}

// fieldType returns the type of the field of struct t that the YAML key
// name decodes into, inline structures' fields included.
func fieldType(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" {
			continue
		}
		if strings.Contains(","+opts+",", ",inline,") {
			it := f.Type
			for it.Kind() == reflect.Pointer {
				it = it.Elem()
			}
			if it.Kind() == reflect.Struct {
				if ft, ok := fieldType(it, name); ok {
					return ft, true
				}
			}
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name)
		}
		if tag == name {
			return f.Type, true
		}
	}
	return nil, false
}
