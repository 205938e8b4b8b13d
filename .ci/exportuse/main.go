// Command exportuse lists, for each package named, the exported
// package-level names and methods that no other package of the module uses
// (tests of other packages and the package's own external tests count as
// users). What is kept and why:
//
//   - a name another package uses;
//   - a type that appears in the declaration of a name that is kept (an
//     exported function's parameters, an exported field, a kept method's
//     receiver), so that no exported API mentions an unexported type;
//   - a method that makes its type satisfy an interface of the module or of a
//     package it imports (YAML and JSON decoders, fmt.Stringer, the
//     limiters' interface), one that the standard library finds at run time
//     (Unwrap, Is, As, Format, ...), or one named as .Name in a string of the
//     package (an html/template reads methods by name);
//   - a name whose lower-case form would collide with a keyword, a
//     predeclared name, a name of the package or a name in scope at a use.
//
// Methods of unexported types are not counted. Fields are not counted: they
// are the shape of the YAML and JSON the packages read and write.
//
// Usage, from the repository root:
//
//	(cd .ci/exportuse && go run . -C ../.. ./slo ./report ./ratelimit ./identity)
//
// It prints one line per name ("keep NAME (why)" with -v, "unused NAME" for
// the rest) and a count per package on stderr, and exits 1 if any name is
// unused. With -w it unexports the unused names instead (uses, the doc
// comment's first word, and mentions in comments that cannot be prose), so
// that go build, go vet and the tests then check the result.
//
// A module of its own, so that golang.org/x/tools is never a dependency of
// the gateway.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"regexp"
	"sort"
	"strings"
	"unicode"

	"golang.org/x/tools/go/packages"
)

// Methods the standard library looks for at run time, through interfaces
// that are not in any package the module's code names.
var dynamic = map[string]bool{
	"Error": true, "String": true, "GoString": true, "Format": true,
	"Unwrap": true, "Is": true, "As": true, "Timeout": true, "Temporary": true,
	"MarshalJSON": true, "UnmarshalJSON": true, "MarshalText": true, "UnmarshalText": true,
	"MarshalYAML": true, "UnmarshalYAML": true, "MarshalBinary": true, "UnmarshalBinary": true,
	"Read": true, "Write": true, "Close": true, "ServeHTTP": true,
}

func main() {
	dir := flag.String("C", ".", "the module's root")
	write := flag.Bool("w", false, "unexport the unused names")
	verbose := flag.Bool("v", false, "also list what is kept, and why")
	flag.Parse()
	cfg := &packages.Config{
		Mode:  packages.NeedName | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedSyntax | packages.NeedFiles | packages.NeedImports | packages.NeedEmbedFiles,
		Tests: true,
		Dir:   *dir,
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if packages.PrintErrors(pkgs) > 0 {
		os.Exit(2)
	}
	targets, err := packages.Load(&packages.Config{Mode: packages.NeedName, Dir: *dir}, flag.Args()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ifaces := interfaces(pkgs)
	failed := false
	for _, t := range targets {
		a := analyse(pkgs, t.PkgPath, ifaces)
		unused := a.report(*verbose)
		if unused > 0 {
			failed = true
		}
		if *write {
			a.rename()
		}
	}
	if failed && !*write {
		os.Exit(1)
	}
}

// key names an object across the variants of its package (with and without
// its tests): "path.Name" or "path.Type.Method"; "" for anything else.
func key(obj types.Object) string {
	if obj == nil || obj.Pkg() == nil {
		return ""
	}
	switch o := obj.(type) {
	case *types.Func:
		if r := o.Type().(*types.Signature).Recv(); r != nil {
			n := recvNamed(r.Type())
			if n == nil {
				return "" // an interface's method
			}
			return o.Pkg().Path() + "." + n.Obj().Name() + "." + o.Name()
		}
	case *types.Var:
		if o.IsField() {
			return ""
		}
	}
	if obj.Parent() != obj.Pkg().Scope() {
		return ""
	}
	return obj.Pkg().Path() + "." + obj.Name()
}

func recvNamed(t types.Type) *types.Named {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, _ := types.Unalias(t).(*types.Named)
	return n
}

func isMethod(obj types.Object) bool {
	f, ok := obj.(*types.Func)
	return ok && f.Type().(*types.Signature).Recv() != nil
}

// lower is the unexported form of a name: NewTracker → newTracker,
// HTTPServer → httpServer, TTFT → ttft.
func lower(s string) string {
	r := []rune(s)
	n := 0
	for n < len(r) && unicode.IsUpper(r[n]) {
		n++
	}
	if n > 1 && n < len(r) {
		n--
	}
	for i := 0; i < n; i++ {
		r[i] = unicode.ToLower(r[i])
	}
	return string(r)
}

func reserved(name string) bool {
	return token.IsKeyword(name) || types.Universe.Lookup(name) != nil
}

// interfaces returns every named interface of the loaded packages and of
// the packages they import, and every interface type they write.
func interfaces(pkgs []*packages.Package) []*types.Interface {
	var out []*types.Interface
	seen := map[*types.Package]bool{}
	var walk func(p *types.Package)
	walk = func(p *types.Package) {
		if seen[p] {
			return
		}
		seen[p] = true
		for _, n := range p.Scope().Names() {
			if tn, ok := p.Scope().Lookup(n).(*types.TypeName); ok {
				if it, ok := tn.Type().Underlying().(*types.Interface); ok {
					out = append(out, it)
				}
			}
		}
		for _, q := range p.Imports() {
			walk(q)
		}
	}
	for _, p := range pkgs {
		walk(p.Types)
		for _, tv := range p.TypesInfo.Types {
			if it, ok := tv.Type.Underlying().(*types.Interface); ok {
				out = append(out, it)
			}
		}
	}
	return out
}

func implements(f *types.Func, ifaces []*types.Interface) bool {
	rt := recvNamed(f.Type().(*types.Signature).Recv().Type())
	for _, it := range ifaces {
		has := false
		for i := 0; i < it.NumMethods(); i++ {
			has = has || it.Method(i).Name() == f.Name()
		}
		if has && (types.Implements(rt, it) || types.Implements(types.NewPointer(rt), it)) {
			return true
		}
	}
	return false
}

type analysis struct {
	path string
	home []*packages.Package     // the package's variants
	defs map[string]types.Object // exported names defined in its non-test files
	keep map[string]string       // key → why it stays exported
}

func analyse(pkgs []*packages.Package, path string, ifaces []*types.Interface) *analysis {
	a := &analysis{path: path, defs: map[string]types.Object{}, keep: map[string]string{}}
	used := map[string]bool{}
	for _, p := range pkgs {
		if p.PkgPath != path {
			for _, obj := range p.TypesInfo.Uses {
				if k := key(obj); k != "" && obj.Pkg().Path() == path {
					used[k] = true
				}
			}
			continue
		}
		a.home = append(a.home, p)
		for id, obj := range p.TypesInfo.Defs {
			k := key(obj)
			if k == "" || !obj.Exported() || strings.HasSuffix(p.Fset.Position(id.Pos()).Filename, "_test.go") {
				continue
			}
			if isMethod(obj) && !recvNamed(obj.(*types.Func).Type().(*types.Signature).Recv().Type()).Obj().Exported() {
				continue
			}
			if _, ok := a.defs[k]; ok && p.ID != p.PkgPath {
				continue // the variant other packages import is the one to check
			}
			a.defs[k] = obj
		}
	}
	named := a.namedInStrings()
	for k, obj := range a.defs {
		switch {
		case used[k]:
			a.keep[k] = "used elsewhere"
		case isMethod(obj) && dynamic[obj.Name()]:
			a.keep[k] = "looked up at run time"
		case isMethod(obj) && implements(obj.(*types.Func), ifaces):
			a.keep[k] = "an interface's method"
		case isMethod(obj) && named[obj.Name()]:
			a.keep[k] = "named in a string"
		}
	}
	a.keepAPITypes()
	a.keepConflicts()
	return a
}

// namedInStrings returns the names written as .Name in the package's string
// literals and embedded files (templates).
func (a *analysis) namedInStrings() map[string]bool {
	re := regexp.MustCompile(`\.([A-Z][A-Za-z0-9_]*)`)
	out := map[string]bool{}
	add := func(s string) {
		for _, m := range re.FindAllStringSubmatch(s, -1) {
			out[m[1]] = true
		}
	}
	for _, p := range a.home {
		for _, f := range p.Syntax {
			ast.Inspect(f, func(n ast.Node) bool {
				if bl, ok := n.(*ast.BasicLit); ok && bl.Kind == token.STRING {
					add(bl.Value)
				}
				return true
			})
		}
		for _, f := range p.EmbedFiles {
			if b, err := os.ReadFile(f); err == nil {
				add(string(b))
			}
		}
	}
	return out
}

// keepAPITypes keeps every type that the declaration of a kept name mentions.
func (a *analysis) keepAPITypes() {
	for changed := true; changed; {
		changed = false
		for k, obj := range a.defs {
			if a.keep[k] == "" {
				continue
			}
			seen := map[types.Type]bool{}
			var visit func(t types.Type)
			visit = func(t types.Type) {
				if t == nil || seen[t] {
					return
				}
				seen[t] = true
				switch u := t.(type) {
				case *types.Named:
					kk := key(u.Obj())
					if _, ok := a.defs[kk]; ok && a.keep[kk] == "" {
						a.keep[kk] = "in the API of " + strings.TrimPrefix(k, a.path+".")
						changed = true
					}
					if ta := u.TypeArgs(); ta != nil {
						for i := 0; i < ta.Len(); i++ {
							visit(ta.At(i))
						}
					}
				case *types.Alias:
					visit(types.Unalias(u))
				case *types.Pointer:
					visit(u.Elem())
				case *types.Slice:
					visit(u.Elem())
				case *types.Array:
					visit(u.Elem())
				case *types.Map:
					visit(u.Key())
					visit(u.Elem())
				case *types.Chan:
					visit(u.Elem())
				case *types.Signature:
					if u.Recv() != nil {
						visit(u.Recv().Type())
					}
					for i := 0; i < u.Params().Len(); i++ {
						visit(u.Params().At(i).Type())
					}
					for i := 0; i < u.Results().Len(); i++ {
						visit(u.Results().At(i).Type())
					}
				case *types.Struct:
					for i := 0; i < u.NumFields(); i++ {
						if u.Field(i).Exported() || u.Field(i).Embedded() {
							visit(u.Field(i).Type())
						}
					}
				case *types.Interface:
					for i := 0; i < u.NumMethods(); i++ {
						visit(u.Method(i).Type())
					}
				}
			}
			if tn, ok := obj.(*types.TypeName); ok {
				visit(tn.Type().Underlying())
			} else {
				visit(obj.Type())
			}
		}
	}
}

// keepConflicts keeps a name whose unexported form is taken.
func (a *analysis) keepConflicts() {
	for k, obj := range a.defs {
		if a.keep[k] != "" {
			continue
		}
		nn := lower(obj.Name())
		switch {
		case reserved(nn):
			a.keep[k] = "its lower-case form " + nn + " is predeclared"
		case isMethod(obj):
			rt := obj.(*types.Func).Type().(*types.Signature).Recv().Type()
			if o, _, _ := types.LookupFieldOrMethod(rt, true, obj.Pkg(), nn); o != nil {
				a.keep[k] = "its type already has " + nn
			}
		default:
			if obj.Pkg().Scope().Lookup(nn) != nil {
				a.keep[k] = "the package already has " + nn
			}
		}
	}
	for _, p := range a.home {
		for id, obj := range p.TypesInfo.Uses {
			k := key(obj)
			if _, ok := a.defs[k]; !ok || a.keep[k] != "" || isMethod(obj) {
				continue
			}
			nn := lower(obj.Name())
			if s := p.Types.Scope().Innermost(id.Pos()); s != nil {
				if o, _ := s.LookupParent(nn, id.Pos()); o != nil {
					a.keep[k] = fmt.Sprintf("%s is in scope at %s", nn, p.Fset.Position(id.Pos()))
				}
			}
		}
	}
}

func (a *analysis) report(verbose bool) (unused int) {
	var keys []string
	for k := range a.defs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := strings.TrimPrefix(k, a.path+".")
		if why := a.keep[k]; why != "" {
			if verbose {
				fmt.Printf("keep   %s (%s)\n", name, why)
			}
			continue
		}
		unused++
		fmt.Printf("unused %s\n", name)
	}
	fmt.Fprintf(os.Stderr, "%s: %d exported names and methods, %d used by other packages or needed, %d used only inside\n",
		a.path, len(a.defs), len(a.defs)-unused, unused)
	return unused
}

type edit struct{ old, new string }

// rename unexports the unused names: every use and definition in the
// package, plus comments (see comments).
func (a *analysis) rename() {
	renamed := map[string]string{} // key without the path → new name
	for k, obj := range a.defs {
		if a.keep[k] == "" {
			renamed[strings.TrimPrefix(k, a.path+".")] = lower(obj.Name())
		}
	}
	edits := map[string]map[int]edit{}
	add := func(file string, off int, old, new string) {
		if edits[file] == nil {
			edits[file] = map[int]edit{}
		}
		edits[file][off] = edit{old, new}
	}
	for _, p := range a.home {
		for _, m := range []map[*ast.Ident]types.Object{p.TypesInfo.Defs, p.TypesInfo.Uses} {
			for id, obj := range m {
				if n, ok := renamed[strings.TrimPrefix(key(obj), a.path+".")]; ok && key(obj) != "" && id.Name == obj.Name() {
					pos := p.Fset.Position(id.Pos())
					add(pos.Filename, pos.Offset, id.Name, n)
				}
			}
		}
	}
	a.comments(renamed, add)
	for file, es := range edits {
		b, err := os.ReadFile(file)
		if err != nil {
			panic(err)
		}
		offs := make([]int, 0, len(es))
		for o := range es {
			offs = append(offs, o)
		}
		sort.Sort(sort.Reverse(sort.IntSlice(offs)))
		for _, o := range offs {
			e := es[o]
			if string(b[o:o+len(e.old)]) != e.old {
				panic(fmt.Sprintf("%s:%d: want %s", file, o, e.old))
			}
			b = append(b[:o], append([]byte(e.new), b[o+len(e.old):]...)...)
		}
		if err := os.WriteFile(file, b, 0o644); err != nil {
			panic(err)
		}
	}
}

// comments renames, in the package's comments, the first word of a renamed
// name's doc comment, Type.Method for a renamed method, and a renamed name
// that cannot be an English word (two humps, NewTracker) and that nothing in
// the package still spells the same way.
func (a *analysis) comments(renamed map[string]string, add func(file string, off int, old, new string)) {
	still := map[string]bool{}
	for _, p := range a.home {
		for _, obj := range p.TypesInfo.Defs {
			if obj == nil || obj.Pkg() == nil || obj.Pkg().Path() != a.path {
				continue
			}
			if _, ok := renamed[strings.TrimPrefix(key(obj), a.path+".")]; !ok || key(obj) == "" {
				still[obj.Name()] = true
			}
		}
	}
	word := regexp.MustCompile(`\b([A-Za-z_][A-Za-z0-9_]*)(\.[A-Za-z_][A-Za-z0-9_]*)?\b`)
	done := map[string]bool{}
	for _, p := range a.home {
		for _, f := range p.Syntax {
			file := p.Fset.Position(f.Pos()).Filename
			if done[file] {
				continue
			}
			done[file] = true
			docOf := docs(f)
			for _, cg := range f.Comments {
				own := docOf[cg]
				for ci, c := range cg.List {
					base := p.Fset.Position(c.Pos()).Offset
					for _, m := range word.FindAllStringSubmatchIndex(c.Text, -1) {
						w := c.Text[m[2]:m[3]]
						if m[4] >= 0 {
							sel := c.Text[m[4]+1 : m[5]]
							if n, ok := renamed[w+"."+sel]; ok {
								add(file, base+m[4]+1, sel, n)
								if t, ok := renamed[w]; ok {
									add(file, base+m[2], w, t)
								}
								continue
							}
						}
						first := ci == 0 && m[2] == 3
						if first && strings.HasSuffix(own, "."+w) {
							if n, ok := renamed[own]; ok {
								add(file, base+m[2], w, n)
								continue
							}
						}
						if n, ok := renamed[w]; ok && (first && own == w || twoHumps(w) && !still[w]) {
							add(file, base+m[2], w, n)
						}
					}
				}
			}
		}
	}
}

// docs maps each doc comment to what it documents: Name or Type.Method.
func docs(f *ast.File) map[*ast.CommentGroup]string {
	out := map[*ast.CommentGroup]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch d := n.(type) {
		case *ast.FuncDecl:
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				t := d.Recv.List[0].Type
				if st, ok := t.(*ast.StarExpr); ok {
					t = st.X
				}
				if id, ok := t.(*ast.Ident); ok {
					name = id.Name + "." + name
				}
			}
			if d.Doc != nil {
				out[d.Doc] = name
			}
		case *ast.GenDecl:
			if d.Doc != nil && len(d.Specs) == 1 {
				switch sp := d.Specs[0].(type) {
				case *ast.TypeSpec:
					out[d.Doc] = sp.Name.Name
				case *ast.ValueSpec:
					out[d.Doc] = sp.Names[0].Name
				}
			}
		case *ast.TypeSpec:
			if d.Doc != nil {
				out[d.Doc] = d.Name.Name
			}
		case *ast.ValueSpec:
			if d.Doc != nil {
				out[d.Doc] = d.Names[0].Name
			}
		}
		return true
	})
	return out
}

func twoHumps(w string) bool {
	seenLower := false
	for _, r := range w {
		if unicode.IsLower(r) {
			seenLower = true
		} else if unicode.IsUpper(r) && seenLower {
			return true
		}
	}
	return false
}
