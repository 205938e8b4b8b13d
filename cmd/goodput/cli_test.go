package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/goodput/goodput/internal/config"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// --help lists every subcommand there is.
func TestHelpListsEveryCommand(t *testing.T) {
	code, out, _ := runCLI("--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, c := range commands {
		if !strings.Contains(out, "\n  "+c.name+" ") {
			t.Errorf("--help does not list %q:\n%s", c.name, out)
		}
	}
	for _, name := range []string{"serve", "sim", "keys", "report", "config", "health", "version"} {
		if !strings.Contains(out, "\n  "+name+" ") {
			t.Errorf("--help does not list %q", name)
		}
	}
	if code, _, errOut := runCLI("nope"); code != 2 || !strings.Contains(errOut, `unknown command "nope"`) || !strings.Contains(errOut, "keys") {
		t.Errorf("unknown command: exit %d, %q", code, errOut)
	}
}

func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version", "-version"} {
		code, out, errOut := runCLI(arg)
		if code != 0 || !strings.HasPrefix(out, "goodput ") || !strings.Contains(out, runtime.GOOS+"/"+runtime.GOARCH) || errOut != "" {
			t.Errorf("%s: exit %d, %q %q", arg, code, out, errOut)
		}
	}
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-01-05T10:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	want := "goodput v1.2.3 (revision 0123456789abcdef0123456789abcdef01234567, modified, 2026-01-05T10:00:00Z; go1.99.1 " + runtime.GOOS + "/" + runtime.GOARCH + ")"
	if got := versionLine(bi, ""); got != want {
		t.Errorf("versionLine:\n got %s\nwant %s", got, want)
	}
	// A version set at link time wins; without build information the
	// line still says what it knows.
	if got := versionLine(bi, "v9.9.9"); !strings.HasPrefix(got, "goodput v9.9.9 (revision 0123") {
		t.Errorf("linked version: %s", got)
	}
	if got := versionLine(nil, ""); !strings.HasPrefix(got, "goodput (devel) (revision unknown; "+runtime.Version()) {
		t.Errorf("no build info: %s", got)
	}
}

// serve -h names every top-level key of the configuration file: as a flag,
// or in the list of settings only the file has.
func TestServeHelpNamesEveryFileSetting(t *testing.T) {
	code, _, help := runCLI("serve", "-h")
	if code != 0 {
		t.Fatalf("serve -h: exit %d", code)
	}
	keys := yamlKeys(reflect.TypeFor[config.Config]())
	if len(keys) < 15 {
		t.Fatalf("found only %d keys: %v", len(keys), keys)
	}
	asFlag := map[string]string{"timeouts": "-connect-timeout"}
	for _, k := range keys {
		flagName := asFlag[k]
		if flagName == "" {
			flagName = "-" + strings.ReplaceAll(k, "_", "-") + " "
		}
		if !strings.Contains(help, "\n  "+k+" ") && !strings.Contains(help, "\n  "+flagName) {
			t.Errorf("serve -h does not mention %q", k)
		}
	}
}

// yamlKeys lists the top-level YAML keys of a struct, inline ones included.
func yamlKeys(typ reflect.Type) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		switch {
		case tag == "-":
		case strings.Contains(opts, "inline"):
			out = append(out, yamlKeys(f.Type)...)
		case name != "":
			out = append(out, name)
		}
	}
	return out
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestConfigCheck(t *testing.T) {
	ioLoopLine := "io_loop       on (experimental)"
	if runtime.GOOS != "linux" {
		ioLoopLine = "io_loop       on, but without effect"
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "goodput.yaml")
	writeFile(t, conf, "upstream: http://127.0.0.1:8000\nrequest_log: requests.jsonl\ntenants_file: tenants.yaml\n"+
		"slos: {interactive: {ttft: 500ms, objective: 0.99}}\ndefault_slo: interactive\nlog_format: json\notel: {traces: true, endpoint: \"http://user:OtelSecret@col:4318\"}\nio_loop: true\n")
	writeFile(t, filepath.Join(dir, "tenants.yaml"), "tenants:\n  - name: acme\n    keys:\n      - id: acme-prod\n        sha256: \""+strings.Repeat("ab", 32)+"\"\n")
	// Checked from another folder: tenants_file is beside the config.
	code, out, errOut := runCLI("config", "check", conf)
	if code != 0 || errOut != "" {
		t.Fatalf("valid config: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{conf + ": ok", "http://127.0.0.1:8000", "127.0.0.1:9090", "1 with 1 gateway keys, from " + filepath.Join(dir, "tenants.yaml"), "interactive; default interactive",
		"log           json, level info", "otel          traces on, metrics off over OTLP/HTTP to http://user:xxxxx@col:4318", ioLoopLine} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	for _, c := range []struct{ name, yaml, want string }{
		{"bare port", "listen: 8080\n", `line 1: listen: "8080" is a port without a host: write ":8080"`},
		{"https", "upstream: https://engine:8443\n", "TLS to the upstream is not supported"},
		{"path", "upstream: http://engine:8000/v1\n", "a path prefix is not supported"},
		{"class", "slos: {a: {ttft: 1s, objective: 0.9}}\n\ndefault_slo: b\n", `line 3: default_slo: "b"`},
		{"missing tenants file", "tenants_file: nowhere.yaml\n", filepath.Join(dir, "nowhere.yaml")},
		{"io_loop not a bool", "io_loop: sometimes\n", "line 1: cannot unmarshal !!str `sometimes` into bool"},
		{"upstream port", "upstream: http://127.0.0.1:99999\n", "the port must be a number from 1 to 65535"},
		{"credential as the tenant header", "tenant_header: Authorization\n", "tenant_header: Authorization carries credentials"},
	} {
		bad := filepath.Join(dir, "bad.yaml")
		writeFile(t, bad, c.yaml)
		code, out, errOut := runCLI("config", "check", bad)
		if code != 1 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 1 and %q", c.name, code, out, errOut, c.want)
		}
	}

	// A gateway key pasted in the wrong field is refused without being
	// quoted: config check's errors are often pasted into tickets (found by
	// a new user's probe: tenants[].slo, slo_by_shape, on_overrun printed
	// it whole).
	const key = "gp-SHVcZDGMSi89pQ3d7x0kAbCdEfGhIjKlMnOpQrStUvW"
	for _, field := range []string{"    slo: " + key + "\n", "    slo_by_shape: {" + key + ": interactive}\n", "    limits: {on_overrun: " + key + "}\n", "    " + key + ": 1\n"} {
		leak := filepath.Join(dir, "leak.yaml")
		writeFile(t, leak, "slos: {interactive: {ttft: 500ms, objective: 0.99}}\ntenants:\n  - name: acme\n"+field+"    keys:\n      - id: k\n        sha256: \""+strings.Repeat("ab", 32)+"\"\n")
		code, out, errOut := runCLI("config", "check", leak)
		if code != 1 || strings.Contains(out+errOut, key[3:19]) || !strings.Contains(errOut, "gp-[redacted]") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 1 and the key redacted", field, code, out, errOut)
		}
		code, _, errOut = runCLI("serve", "--config", leak)
		if code == 0 || strings.Contains(errOut, key[3:19]) || !strings.Contains(errOut, "gp-[redacted]") {
			t.Errorf("serve %q: exit %d, stderr %q; want a failure and the key redacted", field, code, errOut)
		}
	}

	// The same key without its gp- (the whole of its secret) is found by
	// the digest of the file that names it, in the configuration or in
	// its tenants file (a new user's probe: it was quoted).
	sum := sha256.Sum256([]byte(key))
	digest := hex.EncodeToString(sum[:])
	body := key[len("gp-"):]
	tenantsYAML := func(field string) string {
		return "tenants:\n  - name: acme\n" + field + "    keys:\n      - id: k\n        sha256: \"" + digest + "\"\n"
	}
	for _, field := range []string{"    slo: " + body + "\n", "    slo_by_shape: {" + body + ": interactive}\n", "    limits: {on_overrun: x" + body + "}\n"} {
		inline := filepath.Join(dir, "leak.yaml")
		writeFile(t, inline, "slos: {interactive: {ttft: 500ms, objective: 0.99}}\n"+tenantsYAML(field))
		split := filepath.Join(dir, "leak-split.yaml")
		writeFile(t, split, "slos: {interactive: {ttft: 500ms, objective: 0.99}}\ntenants_file: leak-tenants.yaml\n")
		writeFile(t, filepath.Join(dir, "leak-tenants.yaml"), tenantsYAML(field))
		for _, conf := range []string{inline, split} {
			code, out, errOut := runCLI("config", "check", conf)
			if code != 1 || strings.Contains(out+errOut, body[:16]) || !strings.Contains(errOut, "[redacted]") {
				t.Errorf("%s %q: exit %d, stdout %q, stderr %q; want 1 and the key's part redacted", filepath.Base(conf), field, code, out, errOut)
			}
			code, _, errOut = runCLI("serve", "--config", conf, "--listen", "127.0.0.1:0", "--admin-listen", "off")
			if code == 0 || strings.Contains(errOut, body[:16]) || !strings.Contains(errOut, "[redacted]") {
				t.Errorf("serve %s %q: exit %d, stderr %q; want a failure and the key's part redacted", filepath.Base(conf), field, code, errOut)
			}
		}
	}

	// A warning quotes the file too (a review: the check's warning of an
	// unset credential variable quoted the key's part pasted there).
	warned := filepath.Join(dir, "leak.yaml")
	writeFile(t, warned, tenantsYAML("    upstream: {api_key_env: "+body+"}\n"))
	if code, out, errOut := runCLI("config", "check", warned); code != 0 || strings.Contains(out+errOut, body[:16]) || !strings.Contains(errOut, "environment variable [redacted] is not set here") {
		t.Errorf("api_key_env: exit %d, stdout %q, stderr %q; want 0 and the warning with the key's part redacted", code, out, errOut)
	}

	// serve refuses a tenant whose upstream credential's variable is
	// unset; the check, often run where the secrets are not, warns.
	unset := filepath.Join(dir, "unset.yaml")
	writeFile(t, unset, "tenants:\n  - name: acme\n    upstream: {api_key_env: GOODPUT_TEST_NEVER_SET}\n    keys:\n      - id: k\n        sha256: \""+strings.Repeat("ab", 32)+"\"\n")
	if code, _, errOut := runCLI("config", "check", unset); code != 0 || !strings.Contains(errOut, "warning: tenants[0].upstream.api_key_env: environment variable GOODPUT_TEST_NEVER_SET is not set here") {
		t.Errorf("unset credential: exit %d, stderr %q", code, errOut)
	}

	exposed := filepath.Join(dir, "exposed.yaml")
	writeFile(t, exposed, "admin_listen: \":9090\"\n")
	if code, out, errOut := runCLI("config", "check", exposed); code != 0 || !strings.Contains(out, "upstream      none: the built-in simulator") || !strings.Contains(errOut, "WARNING: the admin listener :9090") {
		t.Errorf("exposed admin: exit %d, %q, %q", code, out, errOut)
	} else if !strings.Contains(out, "embedded default (demo)") || !strings.Contains(out, "interactive; default interactive") {
		// What serve runs with: the demo's SLO class, not "none".
		t.Errorf("no upstream, no slos: the demo settings are not said:\n%s", out)
	}
	if code, out, _ := runCLI("config", "check", "-h"); code != 0 || !strings.Contains(out, "config check") {
		t.Errorf("config check -h: exit %d, %q", code, out)
	}
	if code, _, _ := runCLI("config", "check"); code != 2 {
		t.Errorf("no file: exit %d, want 2", code)
	}
	if code, _, errOut := runCLI("config", "check", filepath.Join(dir, "absent.yaml")); code != 1 || !strings.Contains(errOut, "absent.yaml") {
		t.Errorf("absent file: exit %d, %q", code, errOut)
	}
}

func TestHealth(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	if code, out, errOut := runCLI("health", "--admin", addr); code != 0 || !strings.Contains(out, "healthy") {
		t.Errorf("healthy: exit %d, %q %q", code, out, errOut)
	}
	status = http.StatusServiceUnavailable
	if code, _, errOut := runCLI("health", "--admin", addr); code != 1 || !strings.Contains(errOut, "503") {
		t.Errorf("503: exit %d, %q", code, errOut)
	}
	// Nothing listening.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	if code, _, errOut := runCLI("health", "--admin", closed); code != 1 || !strings.Contains(errOut, "unhealthy") {
		t.Errorf("nothing listening: exit %d, %q", code, errOut)
	}
	if code, _, _ := runCLI("health", "--admin", "off"); code != 2 {
		t.Errorf("off: exit %d, want 2", code)
	}
	if code, _, errOut := runCLI("health", "--admin", "http://u:s3cretpw@127.0.0.1:1"); code != 2 || strings.Contains(errOut, "s3cretpw") || !strings.Contains(errOut, "u:xxxxx@") {
		t.Errorf("a URL with a password: exit %d, %q; want 2 and it masked", code, errOut)
	}
	// One whose password url.Parse takes for a port and a fragment.
	if code, _, errOut := runCLI("health", "--admin", "http://u:1234#s3cretpw@127.0.0.1:1"); code != 2 || strings.Contains(errOut, "s3cretpw") {
		t.Errorf("a URL with a password split by url.Parse: exit %d, %q; want 2 and it masked", code, errOut)
	}
	for _, d := range []string{"0s", "-1s"} {
		if code, _, errOut := runCLI("health", "--admin", closed, "--timeout", d); code != 2 || !strings.Contains(errOut, "want a positive duration") {
			t.Errorf("--timeout %s: exit %d, %q; want 2 and the flag refused", d, code, errOut)
		}
	}
	// A stray argument stops Go's flag parsing: keys new says so, not
	// that the flags after it are missing.
	if code, out, errOut := runCLI("keys", "new", "extra", "--tenant", "a", "--id", "b"); code != 2 || out != "" || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Errorf("keys new extra: exit %d, %q %q", code, out, errOut)
	}
	for in, want := range map[string]string{
		":9090": "http://127.0.0.1:9090/healthz", "0.0.0.0:9090": "http://127.0.0.1:9090/healthz",
		"[::]:9090": "http://[::1]:9090/healthz", "10.1.2.3:9": "http://10.1.2.3:9/healthz",
	} {
		if got, err := healthURL(in); err != nil || got != want {
			t.Errorf("healthURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// A stray argument to serve is named once, with where the settings go (it
// said "goodput serve: serve: unexpected argument").
func TestServeStrayArgument(t *testing.T) {
	code, out, errOut := runCLI("serve", "extra", "--listen", "127.0.0.1:0")
	if code != 2 || out != "" || !strings.HasPrefix(errOut, `goodput serve: unexpected argument "extra"`) || !strings.Contains(errOut, "goodput serve -h") {
		t.Errorf("serve extra: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// A running gateway answers goodput health, and says so at start when its
// admin listener accepts other machines.
func TestServeHealthAndExposedAdmin(t *testing.T) {
	s, logs := startServe(t, &config.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0"})
	if code, _, errOut := runCLI("health", "--admin", s.Admin); code != 0 {
		t.Errorf("health of a running gateway: exit %d, %q", code, errOut)
	}
	if strings.Contains(logs.String(), "WARNING: the admin listener") {
		t.Errorf("loopback admin warned about:\n%s", logs)
	}
	_, logs = startServe(t, &config.Config{Listen: "127.0.0.1:0", AdminListen: ":0"})
	if !strings.Contains(logs.String(), "WARNING: the admin listener") || !strings.Contains(logs.String(), "no authentication") {
		t.Errorf("all-interfaces admin not warned about:\n%s", logs)
	}
}

// Every subcommand's -h prints its own usage and exits 0.
func TestSubcommandHelp(t *testing.T) {
	for _, args := range [][]string{{"keys", "-h"}, {"keys", "new", "-h"}, {"sim", "-h"}, {"config", "check", "-h"}} {
		code, out, errOut := runCLI(args...)
		if code != 0 || !strings.Contains(out+errOut, "usage: goodput "+args[0]) || strings.Contains(out+errOut, "Usage of") {
			t.Errorf("%v: exit %d, %q %q", args, code, out, errOut)
		}
	}
}

// config check warns of an OTEL_* variable serve would refuse to start
// with, as of an unset credential variable (a review: it said ok).
func TestConfigCheckWarnsOfTheOTelEnvironment(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "goodput.yaml")
	writeFile(t, conf, "otel: {traces: true, endpoint: \"http://col:4318\"}\n")
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "-1")
	code, _, errOut := runCLI("config", "check", conf)
	if code != 0 || !strings.Contains(errOut, "warning: the environment here: OTEL_BSP_MAX_QUEUE_SIZE=-1") {
		t.Errorf("exit %d, stderr %q; want 0 and the warning", code, errOut)
	}
}
