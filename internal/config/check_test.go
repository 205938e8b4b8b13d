package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/slo"
)

// Each common slip gets a message that says what to write instead, at the
// line it is on.
func TestErrorsNameTheFix(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"upstream: http://127.0.0.1:8000\nlisten: 8080\n", `line 2: listen: "8080" is a port without a host: write ":8080"`},
		{"admin_listen: 9090\n", `admin_listen: "9090" is a port without a host: write ":9090"`},
		{"listen: localhost\n", `listen: "localhost" is not host:port`},
		{"listen: \":http-alt\"\n", "the port must be a number"},
		{"upstream: https://api.example.com\n", "TLS to the upstream is not supported"},
		{"upstream: HTTPS://api.example.com:443\n", "TLS to the upstream is not supported"},
	} {
		_, err := Parse(strings.NewReader(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to contain %q", c.yaml, err, c.want)
		}
	}
	for _, ok := range []string{"listen: \":8080\"\nadmin_listen: \"off\"\n", "listen: \"[::1]:8080\"\nadmin_listen: 127.0.0.1:0\n"} {
		if _, err := Parse(strings.NewReader(ok)); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

// Errors found after decoding (values out of range, unknown classes,
// duplicates) carry the line of the key they are about, as decoding errors
// do.
func TestValidationErrorsHaveLines(t *testing.T) {
	const doc = `slos:
  a: {ttft: 1s, objective: 0.9}
  b:
    ttft: 1s
    objective: 1.5
default_slo: gold
tenants:
  - name: acme
    keys: []
  - name: beta
    slo: silver
    keys:
      - id: k
        sha256: nothex
`
	_, err := Parse(strings.NewReader(doc))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"line 5: slos.b.objective",
		`line 6: default_slo: "gold"`,
		"line 14: tenants[1].keys[0].sha256",
		`line 11: tenants[1].slo: "silver"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%v\nwant it to contain %q", err, want)
		}
	}
}

// An upstream with a path (an OpenAI client's base URL, ending in /v1) is
// refused with its line, as an https:// one is (config check gave none).
func TestUpstreamPathHasLine(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:8000/v1", "http://engine/prefix"} {
		_, err := Parse(strings.NewReader("listen: ':1'\nupstream: " + u + "\n"))
		if err == nil || !strings.Contains(err.Error(), "line 2: upstream: ") || !strings.Contains(err.Error(), "a path prefix is not supported") {
			t.Errorf("upstream %s: %v; want the path refused, with line 2", u, err)
		}
	}
	for _, u := range []string{"http://127.0.0.1:8000", "http://127.0.0.1:8000/", "http://[::1]:8000"} {
		if _, err := Parse(strings.NewReader("upstream: " + u + "\n")); err != nil {
			t.Errorf("upstream %s: %v", u, err)
		}
	}
}

// tenants_file is found beside the configuration file that names it, not
// in the folder the gateway was started from.
func TestTenantsFileBesideTheConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etc")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "goodput.yaml"), "tenants_file: tenants.yaml\n")
	write(t, filepath.Join(dir, "tenants.yaml"), "tenants:\n  - name: acme\n    keys: []\n")
	c, err := Load(filepath.Join(dir, "goodput.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "tenants.yaml"); c.TenantsFile != want {
		t.Errorf("tenants_file %q, want %q", c.TenantsFile, want)
	}
	ts, err := c.LoadTenants()
	if err != nil || len(ts) != 1 || ts[0].Name != "acme" {
		t.Fatalf("tenants %+v, %v", ts, err)
	}
	// An absolute path stays as it is.
	abs := filepath.Join(t.TempDir(), "t.yaml")
	write(t, filepath.Join(dir, "abs.yaml"), "tenants_file: "+abs+"\n")
	if c, err := Load(filepath.Join(dir, "abs.yaml")); err != nil || c.TenantsFile != abs {
		t.Errorf("absolute tenants_file: %q, %v", c.TenantsFile, err)
	}
}

// A tenants file written as a bare list says where the list belongs.
func TestTenantsFileBareList(t *testing.T) {
	err := tenantsFileError(t, "# our tenants\n- name: acme\n  keys: []\n")
	if err == nil || !strings.Contains(err.Error(), "line 2: the file is a bare list; put the list under a tenants: key") {
		t.Fatalf("error %v", err)
	}
}

// Errors in a tenants file give their line, as those of tenants written in
// the configuration do (found by a new-user probe: a duplicate name, a
// duplicate key id and an unknown class gave none).
func TestTenantsFileErrorsGiveTheLine(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "goodput.yaml"), "tenants_file: tenants.yaml\nslos:\n  interactive: {ttft: 500ms, objective: 0.99}\n")
	const key = "\n    keys:\n      - id: a1\n        sha256: \"fc851e6c6162790e05d28d8e033ab9258ce49b7fa4d6092bdb17d479e100bd4b\"\n"
	for _, c := range []struct{ tenants, want string }{
		{"tenants:\n  - name: acme" + key + "  - name: acme\n    keys: []\n", `line 6: tenants[1].name: "acme" is already the name`},
		{"tenants:\n  - name: acme" + key + "  - name: beta" + strings.Replace(key, "fc85", "ab85", 1), `line 8: tenants[1].keys[0].id: "a1" is already used`},
		{"tenants:\n  - name: acme\n    slo: nosuch" + key, `line 3: tenants[0].slo: "nosuch" is not one of the classes`},
		// A shape the judge does not know (found by a new user's probe:
		// config check said ok, serve refused to start).
		{"tenants:\n  - name: acme\n    slo: interactive\n    slo_by_shape: {RAG: interactive}" + key, `line 4: tenants[0].slo_by_shape.RAG: unknown shape "RAG" (want chat, rag or longgen)`},
	} {
		write(t, filepath.Join(dir, "tenants.yaml"), c.tenants)
		cfg, err := Load(filepath.Join(dir, "goodput.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cfg.LoadTenants(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one naming %q", c.tenants, err, c.want)
		}
	}
}

func TestAdminExposed(t *testing.T) {
	for addr, want := range map[string]bool{
		"": false, "off": false, "127.0.0.1:9090": false, "localhost:9090": false, "[::1]:9090": false, "127.0.0.2:9090": false,
		":9090": true, "0.0.0.0:9090": true, "[::]:9090": true, "10.0.0.5:9090": true, "admin.internal:9090": true,
	} {
		if got := AdminExposed(addr); got != want {
			t.Errorf("AdminExposed(%q) = %v, want %v", addr, got, want)
		}
	}
}

// refusedWithLines checks that tenants is refused with want's errors, one a
// line in that order, both in the configuration and in a tenants file;
// rest, when not empty, is the rest of the configuration (after the
// tenants' lines, so that their line numbers are the file's).
func refusedWithLines(t *testing.T, tenants, rest string, want []string) {
	t.Helper()
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		got := strings.Split(err.Error(), "\n")
		if len(got) != len(want) {
			t.Fatalf("%s:\n%s\nwant %d errors", what, err, len(want))
		}
		for i := range want {
			if !strings.Contains(got[i], want[i]) {
				t.Errorf("%s:\n%s\nwant\n%s", what, got[i], want[i])
			}
		}
	}
	_, err := Parse(strings.NewReader(tenants + rest))
	check("configuration", err)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "goodput.yaml"), rest+"tenants_file: tenants.yaml\n")
	write(t, filepath.Join(dir, "tenants.yaml"), tenants)
	cfg, err := Load(filepath.Join(dir, "goodput.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = cfg.LoadTenants()
	check("tenants file", err)
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The label values the gateway gives meanings of its own ("other": what no
// label holds, such as requests without a valid key; "none": a request
// without a model, and "unread": one whose model was not read, model
// label values only) are no tenant's name nor a
// configured label value of the label they belong to, with the line, in
// the configuration and in a tenants file (found by an operator-side
// probe: a tenant "other" shared its series with the unauthorized
// requests). A tenant named "none" shares nothing, and is a name like any
// other (found by a review).
func TestReservedLabelValuesRefused(t *testing.T) {
	const key = "\n    keys:\n      - id: a1\n        sha256: \"fc851e6c6162790e05d28d8e033ab9258ce49b7fa4d6092bdb17d479e100bd4b\"\n"
	const name = "other"
	for _, c := range []struct{ yaml, want string }{
		{"tenants:\n  - name: acme\n    keys: []\n  - name: " + name + key, `line 4: tenants[1].name: "` + name + `" is reserved`},
		{"labels:\n  tenants: [acme, " + name + "]\n", `line 2: labels.tenants[1]: "` + name + `" is reserved`},
		{"labels:\n  models:\n    - llama\n    - other\n", `line 4: labels.models[1]: "other" is reserved`},
		{"labels:\n  models:\n    - llama\n    - none\n", `line 4: labels.models[1]: "none" is reserved`},
		{"labels:\n  models:\n    - llama\n    - unread\n", `line 4: labels.models[1]: "unread" is reserved`},
	} {
		if _, err := Parse(strings.NewReader(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.yaml, err, c.want)
		}
	}
	if err := tenantsFileError(t, "tenants:\n  - name: "+name+key); err == nil || !strings.Contains(err.Error(), `line 2: tenants[0].name: "`+name+`" is reserved`) {
		t.Errorf("tenants file with %q: error %v", name, err)
	}
	// Other spellings are names like any other, and so are tenants "none"
	// and "unread".
	if _, err := Parse(strings.NewReader("tenants:\n  - name: Other\n    keys: []\n  - name: none\n    keys: []\n  - name: unread\n    keys: []\nlabels:\n  tenants: [none, unread]\n  models: [none-of-these, default]\n")); err != nil {
		t.Error(err)
	}
}

// A configured label value with an invisible character (a format character
// such as a bidi override, a zero-width joiner) is refused with its line,
// as one with a control character is: "a\u202eevil" showed as "alive" on
// the live page (found by an operator-side probe).
func TestInvisibleLabelValuesRefused(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"labels:\n  tenants: [acme, \"a\\u202Eevil\"]\n", `line 2: labels.tenants[1]: "a\u202eevil" cannot be a label value`},
		{"labels:\n  models:\n    - \"llama\\u200B3\"\n", `line 3: labels.models[0]: "llama\u200b3" cannot be a label value`},
		{"labels:\n  tenants: [\"\\uFEFFacme\"]\n", `line 2: labels.tenants[0]: "\ufeffacme" cannot be a label value`},
	} {
		_, err := Parse(strings.NewReader(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "format characters") {
			t.Errorf("%q: error %v, want one containing %q", c.yaml, err, c.want)
		}
	}
	if _, err := Parse(strings.NewReader("labels:\n  tenants: [\"équipe-中文\"]\n")); err != nil {
		t.Error(err)
	}
}

// A second YAML document in the configuration or in a tenants file is an
// error with its line: only the first was read, and what followed a "---"
// (a tenant, a limit) was silently left out (found by an operator-side
// probe).
func TestSecondDocumentRefused(t *testing.T) {
	if _, err := Parse(strings.NewReader("upstream: http://127.0.0.1:8000\n---\nlisten: :1\n")); err == nil || !strings.Contains(err.Error(), "line 2: a second YAML document") {
		t.Errorf("configuration: %v", err)
	}
	if err := tenantsFileError(t, "tenants:\n  - name: acme\n    keys: []\n---\ntenants:\n  - name: beta\n    keys: []\n"); err == nil || !strings.Contains(err.Error(), "line 4: a second YAML document") {
		t.Errorf("tenants file: %v", err)
	}
}

// A file holding the gateway keys that other users may write (or replace,
// through its folder) is named in a warning: whoever writes it has a key of
// their own, loaded by the gateway within two seconds. Nothing said so.
func TestKeysFileWritableByOthersWarns(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "goodput.yaml"), "tenants_file: tenants.yaml\n")
	tenants := filepath.Join(dir, "tenants.yaml")
	write(t, tenants, "tenants:\n  - name: acme\n    keys: []\n")
	cfg, err := Load(filepath.Join(dir, "goodput.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file, dir os.FileMode
		want      []string
	}{
		{0o600, 0o755, nil},
		{0o644, 0o755, nil},
		{0o666, 0o755, []string{"tenants_file " + tenants + " is writable by any user (mode 0666)"}},
		{0o664, 0o775, nil}, // a umask of 002: its group only (a review found it named at every start)
		{0o646, 0o755, []string{"(mode 0646)"}},
		{0o644, 0o777, []string{"the folder " + dir + " of tenants_file is writable"}},
		{0o644, 0o777 | os.ModeSticky, nil},
	} {
		if err := os.Chmod(tenants, c.file); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, c.dir); err != nil {
			t.Fatal(err)
		}
		got := cfg.KeysFileWarnings()
		if len(got) != len(c.want) {
			t.Errorf("file %#o, folder %v: %q, want %d warnings", c.file, c.dir, got, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("file %#o, folder %v: %q, want %q", c.file, c.dir, got[i], w)
			}
		}
	}
	os.Chmod(dir, 0o755)
	// Tenants in the configuration itself: the configuration is the file.
	path := filepath.Join(dir, "inline.yaml")
	write(t, path, "tenants:\n  - name: acme\n    keys: []\n")
	os.Chmod(path, 0o646)
	if cfg, err = Load(path); err != nil {
		t.Fatal(err)
	}
	if got := cfg.KeysFileWarnings(); len(got) != 1 || !strings.Contains(got[0], "the configuration (it holds the tenants) "+path) {
		t.Errorf("inline tenants: %q", got)
	}
	// A tenants file that is a link into a folder any user may write: that
	// folder is named (a review found it was not).
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(open, "real.yaml"), "tenants:\n  - name: acme\n    keys: []\n")
	link := filepath.Join(dir, "linked.yaml")
	if err := os.Symlink(filepath.Join(open, "real.yaml"), link); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "linked-config.yaml"), "tenants_file: linked.yaml\n")
	if cfg, err = Load(filepath.Join(dir, "linked-config.yaml")); err != nil {
		t.Fatal(err)
	}
	if got := cfg.KeysFileWarnings(); len(got) != 1 || !strings.Contains(got[0], "the folder "+open+" of tenants_file") {
		t.Errorf("linked tenants file: %q", got)
	}
}

// A model's aliases are read beside its limits, and the names that would
// let a request count against the wrong model's limits (an alias that is
// another model's name or alias, two models Ollama reads as one) are
// refused with the line of the name, in the configuration and in a tenants
// file (the line of a path with a model's name in it was the tenant's).
func TestModelNamesCheckedWithLines(t *testing.T) {
	const tenants = "tenants:\n  - name: acme\n    keys: []\n    models:\n      llama3: {tpm: 5}\n      big:\n        tpm: 9\n        aliases: [l3, LLAMA3]\n      Llama3:latest: {rpm: 1}\n      small.v1: {rpm: 2, aliases: [big]}\n"
	want := []string{
		`line 5: tenants[0].models["llama3"]: "llama3" and "Llama3:latest" (tenants[0].models["Llama3:latest"], of model "Llama3:latest") are the same model to Ollama`,
		`line 8: tenants[0].models["big"].aliases[1]: "LLAMA3" and "Llama3:latest"`,
		`line 10: tenants[0].models["small.v1"].aliases[0]: "big" is already a name of model "big" (tenants[0].models["big"])`,
	}
	refusedWithLines(t, tenants, "", want)

	ok := "tenants:\n  - name: acme\n    keys: []\n    models:\n      llama3: {tpm: 5, aliases: [LLAMA3, l3]}\n      meta-llama/Llama-3.1-8B-Instruct: {tpm: 9, aliases: [llama-8b]}\n"
	c, err := Parse(strings.NewReader(ok))
	if err != nil {
		t.Fatal(err)
	}
	if a := c.Tenants[0].ModelAliases; len(a) != 2 || len(a["llama3"]) != 2 || a["meta-llama/Llama-3.1-8B-Instruct"][0] != "llama-8b" {
		t.Fatalf("aliases %q", a)
	}
}

// Two models of a tenant that say default: true are refused with the line
// of each, in the configuration and in a tenants file: a request that
// names no model would count against one of them only.
func TestDefaultModelCheckedWithLines(t *testing.T) {
	const tenants = "tenants:\n  - name: acme\n    keys: []\n    models:\n      llama3: {tpm: 5, default: true}\n      big:\n        tpm: 9\n        default: true\n      small: {rpm: 2, default: false}\n"
	want := []string{
		`line 5: tenants[0].models["llama3"].default: 2 models say default: true ("big", "llama3")`,
		`line 8: tenants[0].models["big"].default: 2 models say default: true ("big", "llama3")`,
	}
	refusedWithLines(t, tenants, "", want)

	ok := strings.Replace(tenants, "tpm: 5, default: true", "tpm: 5", 1)
	c, err := Parse(strings.NewReader(ok))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Tenants[0].ModelDefault; len(d) != 2 || !d["big"] || d["small"] {
		t.Fatalf("defaults %v", d)
	}
}

// A tenant's slo_by_model entry under another name of a configured model
// (an alias, a spelling Ollama reads as the model) is refused with its
// line, unless the model's own entry gives the same class: the judge finds
// a request's class by the model its limits matched, and such an entry
// judged the requests that gave that name by one class and the model's
// others (its name, none for the default model) by another.
func TestSLOByModelNamesCheckedWithLines(t *testing.T) {
	const slos = "slos:\n  interactive: {ttft: 500ms, objective: 0.99}\n  batch: {e2e: 300s, objective: 0.9}\n"
	const tenants = "tenants:\n  - name: acme\n    keys: []\n    slo: interactive\n    models:\n      llama-70b: {aliases: [big], default: true}\n      llama3: {}\n" +
		"    slo_by_model:\n      big: batch\n      LLAMA3:latest: batch\n      llama3: interactive\n      unlisted: batch\n"
	want := []string{
		`line 9: tenants[0].slo_by_model["big"]: "big" is an alias of model "llama-70b": its class "batch" would judge only the requests that give this name, and the model's others (under its name, other names, or none when it is the default model) by another; write the entry under the model's name, "llama-70b"`,
		`line 10: tenants[0].slo_by_model["LLAMA3:latest"]: "LLAMA3:latest" is the same model as "llama3" to Ollama (which reads names regardless of case, a missing tag as latest), whose entry (tenants[0].slo_by_model["llama3"]) says "interactive": the model's requests would be judged by "batch" or "interactive" depending on the name they give; keep the model's entry only`,
	}
	refusedWithLines(t, tenants, slos, want)

	// The model's name, and another name that agrees with it.
	ok := strings.NewReplacer("big: batch", "llama-70b: batch", "LLAMA3:latest: batch", "LLAMA3:latest: interactive").Replace(tenants)
	c, err := Parse(strings.NewReader(ok + slos))
	if err != nil {
		t.Fatal(err)
	}
	if m := c.Tenants[0].SLOByModel; len(m) != 4 || m["llama-70b"] != "batch" {
		t.Fatalf("slo_by_model %v", m)
	}
}

// A configuration naming a key twice is refused at the second, at about
// the file's cost (the YAML decoder alone made an error of every pair of
// duplicates: gigabytes for a few thousand), and one mapping may not hold
// more keys than cfgtypes.MaxMappingKeys.
func TestRepeatedKeyRefusedAtItsCost(t *testing.T) {
	_, err := Parse(strings.NewReader("listen: \":8080\"\n" + strings.Repeat("request_log: x.jsonl\n", 5000)))
	if err == nil || !strings.Contains(err.Error(), `line 3: mapping key "request_log" already defined at line 2`) || len(err.Error()) > 200 {
		t.Fatalf("error %.300v", err)
	}
}

// A tenant's errors come in one order, its overrides' sorted by name, so
// that a check run twice says the same (a review found them in map
// order).
func TestTenantClassErrorsInOrder(t *testing.T) {
	tenants := []ratelimit.TenantConfig{{Name: "acme", SLO: "interactive",
		SLOByModel: map[string]string{"zeta-model": "nosuch", "alpha-model": "nosuch", "mid-model": "nosuch"},
		SLOByShape: map[string]string{"zeta": "interactive", "alpha": "interactive", "RAG": "interactive"},
	}}
	classes := map[string]*slo.Class{"interactive": {}}
	want := ""
	for range 20 {
		err := CheckTenantClasses(tenants, classes, "")
		if err == nil {
			t.Fatal("no error")
		}
		got := err.Error()
		if want == "" {
			want = got
		} else if got != want {
			t.Fatalf("the errors came in another order:\n%s\nthen\n%s", want, got)
		}
	}
	lines := strings.Split(want, "\n")
	for i, prefix := range []string{"tenants[0].slo_by_model.alpha-model", "tenants[0].slo_by_model.mid-model", "tenants[0].slo_by_model.zeta-model", "tenants[0].slo_by_shape.RAG", "tenants[0].slo_by_shape.alpha", "tenants[0].slo_by_shape.zeta"} {
		if i >= len(lines) || !strings.HasPrefix(lines[i], prefix) {
			t.Fatalf("line %d of\n%s\nwant it to begin %q", i, want, prefix)
		}
	}
}

// An upstream credential written in the file that serve would refuse
// (only white space, a control character inside) is refused by the
// configuration's own check, with its line and without being quoted:
// `goodput config check` said ok to a file serve then refused to start
// with, and a reload gave no line.
func TestUpstreamCredentialCheckedWithTheFile(t *testing.T) {
	for _, c := range []struct{ key, want string }{
		{`"sk-ac\nme"`, "line 5: tenants[0].upstream.api_key: the upstream credential holds a control character"},
		{`"sk\u007fx"`, "line 5: tenants[0].upstream.api_key: the upstream credential holds a control character"},
		{`"   "`, "line 5: tenants[0].upstream.api_key: the upstream credential is only white space"},
	} {
		doc := "tenants:\n  - name: acme\n    keys: []\n    upstream:\n      api_key: " + c.key + "\n"
		_, err := Parse(strings.NewReader(doc))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "sk") {
			t.Errorf("%s: error %v, want %q", c.key, err, c.want)
		}
	}
	if _, err := Parse(strings.NewReader("tenants:\n  - name: acme\n    keys: []\n    upstream: {api_key: \" sk-acme\\n\"}\n")); err != nil {
		t.Errorf("a credential with a line break after it: %v", err)
	}
}

// A number with a fraction where the setting is a whole number is refused
// with its line and key, in the configuration and in a tenants file: the
// YAML decoder cut it without a word, and `max_concurrency: 0.9` or
// `rpm: 0.5` became 0, no limit at all.
func TestFractionRefusedWhereAWholeNumberIsDue(t *testing.T) {
	const key = "\n    keys:\n      - id: a1\n        sha256: \"fc851e6c6162790e05d28d8e033ab9258ce49b7fa4d6092bdb17d479e100bd4b\"\n"
	for _, c := range []struct{ doc, want string }{
		{"tenants:\n  - name: acme\n    limits: {rpm: 0.5}" + key, "line 3: tenants[0].limits.rpm: 0.5 is not a whole number (it would be read as 0)"},
		{"tenants:\n  - name: acme\n    models: {llama: {max_concurrency: 0.9}}" + key, "line 3: tenants[0].models.llama.max_concurrency: 0.9 is not a whole number"},
		{"labels: {max_values: 2.5}\n", "line 1: labels.max_values: 2.5 is not a whole number (it would be read as 2)"},
		{"ratelimit: {default_max_tokens: 100.5}\n", "line 1: ratelimit.default_max_tokens: 100.5 is not a whole number"},
		{"shapes: {rag_min_isl: 2047.5}\n", "line 1: shapes.rag_min_isl: 2047.5 is not a whole number"},
		// Through YAML's merge key, which the decoder reads as the
		// mapping's own keys (labels takes it).
		{"labels: {<<: {max_values: 2.5}}\n", "line 1: labels.<<.max_values: 2.5 is not a whole number (it would be read as 2)"},
	} {
		if _, err := Parse(strings.NewReader(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.doc, err, c.want)
		}
	}
	if c, err := Parse(strings.NewReader("max_body_bytes: 1e6\ntenants:\n  - name: acme\n    limits: {rpm: 6e2}" + key)); err != nil || c.MaxBodyBytes != 1000000 || c.Tenants[0].Limits.RPM != 600 {
		t.Fatalf("whole numbers written as floats: %v", err)
	}

	if err := tenantsFileError(t, "tenants:\n  - name: acme"+key+"    limits:\n      max_concurrency: 0.9\n"); err == nil || !strings.Contains(err.Error(), "line 7: tenants[0].limits.max_concurrency: 0.9 is not a whole number (it would be read as 0)") {
		t.Fatalf("tenants file: %v", err)
	}
}

// A file of many mistakes gets an error of at most cfgtypes.MaxErrors
// lines and the count of the others, each line of a bounded size: a
// reload logs the error as one line, and 5,000 models saying default:
// true (119 KB) made an error of 220 MB, each line naming all of them,
// which took a gateway that reloaded it past 1.8 GB; an alias repeated
// 600,000 times (1.2 MB), 71 MB.
func TestManyMistakesMakeABoundedError(t *testing.T) {
	var models, aliases strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&models, "m%d: {default: true}, ", i)
		aliases.WriteString("a, ")
	}
	for _, c := range []struct{ doc, want string }{
		{"tenants:\n  - name: acme\n    keys: []\n    models: {" + models.String() + "}\n", "and 4900 more errors, not shown (the first 100 are)"},
		{"tenants:\n  - name: acme\n    keys: []\n    models: {m: {aliases: [" + aliases.String() + "]}}\n", "and 4899 more errors, not shown (the first 100 are)"},
	} {
		_, err := Parse(strings.NewReader(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) || len(err.Error()) > 64<<10 {
			t.Errorf("%.80q: error of %d bytes, want at most 64 KiB, ending %q: %.300v", c.doc, len(fmt.Sprint(err)), c.want, err)
		}
	}
	// The first lines are those of the file's first mistakes, with
	// their lines, and name a few of the models.
	_, err := Parse(strings.NewReader("tenants:\n  - name: acme\n    keys: []\n    models: {" + models.String() + "}\n"))
	first, _, _ := strings.Cut(err.Error(), "\n")
	if want := `line 4: tenants[0].models["m0"].default: 5000 models say default: true ("m0", "m1", "m10", "m100", "m1000", "m1001", "m1002", "m1003", …)`; !strings.HasPrefix(first, want) {
		t.Errorf("first line %q, want it to begin %q", first, want)
	}

	// Tenants naming a class that is not there, likewise.
	ts := make([]ratelimit.TenantConfig, 300)
	for i := range ts {
		ts[i] = ratelimit.TenantConfig{Name: fmt.Sprintf("t%d", i), SLO: "nosuch"}
	}
	if err := CheckTenantClasses(ts, nil, ""); err == nil || !strings.HasSuffix(err.Error(), "and 200 more errors, not shown (the first 100 are)") {
		t.Errorf("classes: %.300v", err)
	}
}

// A tenant_header no request can carry is refused: the gateway refuses a
// header whose name is not an HTTP token, so every request was the tenant
// default, and `goodput config check` said ok.
func TestTenantHeaderIsAHeaderName(t *testing.T) {
	for _, bad := range []string{`"X-Ténant"`, `"X-Tenant\u007f"`, `"X(Tenant)"`, `"X-Tenant\u0000"`, `"X Tenant"`, `"X-Tenant:"`} {
		if _, err := Parse(strings.NewReader("tenant_header: " + bad + "\n")); err == nil || !strings.Contains(err.Error(), "line 1: tenant_header: ") || !strings.Contains(err.Error(), "is not a header name") {
			t.Errorf("%s: error %v", bad, err)
		}
	}
	for _, ok := range []string{"X-Tenant", "x_team.id", "Team!"} {
		if _, err := Parse(strings.NewReader("tenant_header: " + ok + "\n")); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// A class name that is a gateway key is refused without being quoted,
// whether shaped like one (gp-...) or one of the tenants' keys of the
// operator's own form, in the tenants or their file: class names are label
// values of the metrics, and are in the admin API and every judged record
// (a probe found a key pasted as a class name in 13 lines of /metrics).
func TestClassNamedByAKeyRefused(t *testing.T) {
	const gpKey = "gp-kVdppMscpBJaYImpcJj8nzqwQ0ax4jRiLB9g47hp7eA"
	const own = "opkey-secret-abc" // its SHA-256 below
	const digest = "519f125679072d134e2837648b58a6a2541cb580153e29642868bc70b102d7f0"
	tenants := "tenants:\n  - name: acme\n    keys: [{id: a1, sha256: \"" + digest + "\"}]\n"
	for _, c := range []struct{ name, want string }{
		{gpKey, "slos: a class name shaped like a gateway key"},
		{own, "slos: a class name is one of the tenants' gateway keys"},
	} {
		doc := "slos: {\"" + c.name + "\": {ttft: 1s, objective: 0.9}}\ndefault_slo: \"" + c.name + "\"\n"
		_, err := Parse(strings.NewReader(doc + tenants))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), c.name[3:]) {
			t.Errorf("%s: error %v, want %q, not quoting it", c.name, err, c.want)
		}
		dir := t.TempDir()
		write(t, filepath.Join(dir, "goodput.yaml"), doc+"tenants_file: tenants.yaml\n")
		write(t, filepath.Join(dir, "tenants.yaml"), tenants)
		cfg, err := Load(filepath.Join(dir, "goodput.yaml"))
		if err == nil {
			_, err = cfg.LoadTenants()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), c.name[3:]) {
			t.Errorf("%s in a tenants file's configuration: error %v, want %q", c.name, err, c.want)
		}
	}
	// A name that is no key passes.
	if _, err := Parse(strings.NewReader("slos: {opkey-public: {ttft: 1s, objective: 0.9}}\ndefault_slo: opkey-public\n" + tenants)); err != nil {
		t.Fatal(err)
	}
}

// A key's sha256 longer than a SHA-256 (a SHA-512 pasted, 128 hex
// characters) is refused as one of the wrong length, not a panic: the
// check of class names against the tenants' keys decoded it into 32
// bytes before looking at its length, which ran config check, serve and
// a reload of a configuration with its tenants in it (SIGHUP) out of
// range.
func TestLongKeyHashWithClassesRefused(t *testing.T) {
	for _, n := range []int{66, 128} {
		doc := "slos: {interactive: {ttft: 1s, objective: 0.9}}\ndefault_slo: interactive\n" +
			"tenants:\n  - name: acme\n    keys: [{id: a1, sha256: \"" + strings.Repeat("ab", n/2) + "\"}]\n"
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%d hex characters: panic %v", n, p)
				}
			}()
			_, err = Parse(strings.NewReader(doc))
		}()
		if err == nil || !strings.Contains(err.Error(), "want 64 hex characters") {
			t.Errorf("%d hex characters: error %v, want 64 hex characters", n, err)
		}
	}
}

// A label value or the simulator's model shaped like a gateway key is
// refused without being quoted: label values are written to the metrics,
// and the simulator lists its model to every client (a probe got a key
// pasted as sim.model back from /v1/models).
func TestKeyShapedLabelsAndSimModelRefused(t *testing.T) {
	const key = "gp-kVdppMscpBJaYImpcJj8nzqwQ0ax4jRiLB9g47hp7eA"
	for _, c := range []struct{ doc, want string }{
		{"labels: {tenants: [acme, \"" + key + "\"]}\n", "line 1: labels.tenants[1]: shaped like a gateway key"},
		{"labels: {tenants: [gp-research-east-2026]}\n", "line 1: labels.tenants[0]: shaped like a gateway key"}, // as a tenant's name
		{"labels: {models: [\"org/" + key + "\"]}\n", "line 1: labels.models[0]: shaped like a gateway key"},
		{"sim: {model: \"" + key + "\"}\n", "line 1: sim.model: a model name that holds a whole gateway key"},
	} {
		_, err := Parse(strings.NewReader(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), key[3:]) {
			t.Errorf("%q: error %v, want %q", c.doc, err, c.want)
		}
	}
	if _, err := Parse(strings.NewReader("labels: {models: [acme/gp-finetuned-support-v2]}\nsim: {model: acme/gp-finetuned-support-v2}\n")); err != nil {
		t.Fatal(err)
	}
}

// The configuration's errors, all sections together, are at most
// cfgtypes.MaxErrors and a count: 9,000 classes each wrong in four ways
// (467 KB) made 2.4 MB of errors.
func TestConfigErrorsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("slos: {")
	for i := range 300 {
		fmt.Fprintf(&b, "c%d: {ttft: 0s, tpot: 0s, e2e: 0s, objective: 5}, ", i)
	}
	b.WriteString("}\n")
	_, err := Parse(strings.NewReader(b.String()))
	if err == nil || strings.Count(err.Error(), "\n") != cfgtypes.MaxErrors || !strings.HasSuffix(err.Error(), "and 1100 more errors, not shown (the first 100 are)") {
		t.Fatalf("%d lines: %.300v", strings.Count(fmt.Sprint(err), "\n")+1, err)
	}
}

// tenantsFileError loads a configuration whose tenants_file holds tenants
// and returns LoadTenants' error.
func tenantsFileError(t *testing.T, tenants string) error {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "goodput.yaml"), "tenants_file: tenants.yaml\n")
	write(t, filepath.Join(dir, "tenants.yaml"), tenants)
	cfg, err := Load(filepath.Join(dir, "goodput.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = cfg.LoadTenants()
	return err
}
