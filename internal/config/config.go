// Package config reads goodput's YAML configuration file. Unknown keys are
// errors, and every error names the field it is about.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/goodput/goodput/export"
	"github.com/goodput/goodput/export/otlp"
	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/keyshape"
	"github.com/goodput/goodput/internal/regfile"
	"github.com/goodput/goodput/internal/urlredact"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/slo"
	"go.yaml.in/yaml/v3"
)

// Config is the whole configuration file. The zero value of a field means
// the default its comment names.
type Config struct {
	// Upstream is the engine's base URL. Absent: `serve` runs the built-in
	// simulator in-process and proxies to it. Present but empty (an unset
	// variable in a template) is an error, never the simulator.
	Upstream string `yaml:"upstream"`
	// Listen is the proxy's address. Empty means ":8080".
	Listen string `yaml:"listen"`
	// AdminListen serves /metrics, /healthz and /readyz. Empty means
	// "127.0.0.1:9090"; "off" disables it.
	AdminListen string `yaml:"admin_listen"`
	// RequestLog is the JSON Lines request log; "-" is standard output;
	// empty means no request log.
	RequestLog string `yaml:"request_log"`
	// TenantHeader carries the tenant name. Empty means "X-Tenant".
	TenantHeader string `yaml:"tenant_header"`
	// MaxBodyBytes limits request bodies. Zero means 16 MiB.
	MaxBodyBytes int `yaml:"max_body_bytes"`
	// MaxBodyMemory bounds the request bodies held in memory at once
	// (proxy.Config.MaxBodyMemory): past it, a request whose body finds no
	// room is refused (503) before its body is read. Zero means a quarter
	// of the memory the process may use (its cgroup's limit, else the
	// machine's), and never less than MaxBodyBytes; otherwise it must be
	// at least MaxBodyBytes.
	MaxBodyMemory int64 `yaml:"max_body_memory"`
	// MaxLagMemory bounds what the streams of clients that read more
	// slowly than the engine writes hold for them in all
	// (proxy.Config.MaxLagMemory): past it, each such client is held to
	// 16 KiB queued, its stream waiting for it. Zero means a quarter of the
	// memory the process may use, as MaxBodyMemory.
	MaxLagMemory int64 `yaml:"max_lag_memory"`
	// MaxEventBytes is the largest single stream event metered
	// (proxy.Config.MaxEventBytes). Zero means 1 MiB; otherwise it must lie
	// from MinEventBytes to MaxEventBytesLimit.
	MaxEventBytes int `yaml:"max_event_bytes"`
	// IOLoop has streamed responses read by a few epoll loops instead of
	// a goroutine woken per event (proxy.Config.IOLoop): experimental, off
	// by default, Linux only.
	IOLoop bool `yaml:"io_loop"`
	// Timeouts bound the upstream exchange, and reading client requests.
	Timeouts Timeouts `yaml:"timeouts"`
	// MaxConnections caps the open client connections; at the cap the
	// gateway stops accepting and new connections wait in the kernel's
	// backlog until one closes. Zero means (open-files limit − 64) / 2, at
	// most 16384: every client connection can then hold an upstream one.
	MaxConnections int `yaml:"max_connections"`
	// GCPercent is the Go collector's target for `serve` (what GOGC sets):
	// how far, in percent, the heap may grow past what the last collection
	// left live before the next one. Zero means 10 (Go's default is 100):
	// most of a stream's memory is heap that stays live while it streams,
	// and 100 lets the heap double it, while the gateway allocates little
	// per request and nothing per event, so the extra collections cost
	// next to no CPU (measured: docs/OVERHEAD.md). The GOGC environment
	// variable, when set, wins.
	GCPercent int `yaml:"gc_percent"`
	// ShutdownGrace is how long a shutdown (SIGTERM, SIGINT) waits for the
	// requests in flight before it cuts them, each still ending as a record.
	// Zero means 25s: under Kubernetes' default 30s grace period, leaving
	// room to write the cut requests' records before SIGKILL.
	ShutdownGrace cfgtypes.Duration `yaml:"shutdown_grace"`
	// Labels bounds metric label values.
	Labels Labels `yaml:"labels"`
	// Sim configures the built-in simulator used when Upstream is empty.
	Sim Sim `yaml:"sim"`

	// Tenants, with their gateway keys, limits and SLO class. Non-empty (or
	// TenantsFile set): every request must carry a valid gateway key. Empty:
	// no authentication, the tenant comes from TenantHeader.
	Tenants []ratelimit.TenantConfig `yaml:"tenants"`
	// TenantsFile is a YAML file with a `tenants:` list, used instead of
	// Tenants. Both it and this file are reloaded on SIGHUP and when they
	// change. Empty: none.
	TenantsFile string `yaml:"tenants_file"`
	// RateLimit selects the limits backend (local or redis).
	RateLimit ratelimit.BackendConfig `yaml:"ratelimit"`
	// SLO holds the SLO classes (`slos:`) and shape thresholds (`shapes:`).
	SLO slo.Config `yaml:",inline"`
	// DefaultSLO judges tenants that name no class, and every tenant when no
	// tenants are configured. Empty: those requests are not judged.
	DefaultSLO string `yaml:"default_slo"`

	// LogFormat is the format of the gateway's own log (standard error):
	// "text" (key=value, the default) or "json" (one object a line).
	LogFormat string `yaml:"log_format"`
	// LogLevel is the least level logged: debug, info (the default), warn
	// or error.
	LogLevel string `yaml:"log_level"`

	// OTel exports traces and metrics over OTLP (package export/otlp). Off
	// unless this section or the OTEL_* environment variables turn it on.
	OTel otlp.Config `yaml:"otel"`

	// Path is the file this configuration was read from ("" for none).
	Path string `yaml:"-"`

	// digests are the key digests of a file this configuration was read
	// from that cannot be read again (RedactKeys).
	digests []string

	// asRead is a copy of the settings as the file gave them, before the
	// command line's flags and the defaults of serve changed them (AsRead).
	asRead *Config
}

// AsRead returns the settings as the file gave them, before flags and
// defaults changed them; c itself for a configuration not read from a
// file. A reload compares the file's settings with these.
func (c *Config) AsRead() *Config {
	if c.asRead == nil {
		return c
	}
	return c.asRead
}

// DefaultMaxBodyBytes is max_body_bytes when none is set (the proxy's
// default).
const DefaultMaxBodyBytes = 16 << 20

// The range of max_event_bytes. Below 4 KiB, ordinary chunks would stop
// the metering (the largest chat or completions chunk in the recorded
// streams is about 2 KiB). Above 64 MiB, one stream could hold too much: a
// stream reading an event holds up to about three times its size (the
// framer's buffer, which grows by doubling, and the copy queued for the
// client).
const (
	MinEventBytes      = 4 << 10
	MaxEventBytesLimit = 64 << 20
)

// Timeouts of the upstream exchange; zero means the proxy's default
// (connect 5s, first_byte 60s, first_token 300s, idle 30s, total
// 30m). ReadHeader and ReadBody bound reading a client's request
// (default 10s and 30s). UpstreamKeepalive is how long an idle upstream
// connection is kept for reuse (default 90s).
type Timeouts struct {
	Connect    cfgtypes.Duration `yaml:"connect"`
	FirstByte  cfgtypes.Duration `yaml:"first_byte"`
	FirstToken cfgtypes.Duration `yaml:"first_token"`
	Idle       cfgtypes.Duration `yaml:"idle"`
	Total      cfgtypes.Duration `yaml:"total"`

	ReadHeader cfgtypes.Duration `yaml:"read_header"`
	ReadBody   cfgtypes.Duration `yaml:"read_body"`

	UpstreamKeepalive cfgtypes.Duration `yaml:"upstream_keepalive"`
}

// Labels lists the tenant and model label values metrics may carry.
// Empty lists admit the first MaxValues values seen; the rest are "other".
type Labels struct {
	Tenants   []string `yaml:"tenants"`
	Models    []string `yaml:"models"`
	MaxValues int      `yaml:"max_values"` // zero means 32
	// MaxPairs bounds the tenant-and-model pairs with series of their
	// own (export.Labeler.LimitPairs); zero means the default.
	MaxPairs int `yaml:"max_pairs"`
}

// Sim configures the embedded simulator; zero values take the simulator's
// defaults.
type Sim struct {
	Model string            `yaml:"model"`
	TTFT  cfgtypes.Duration `yaml:"ttft"`
	ITL   cfgtypes.Duration `yaml:"itl"`
}

// Load reads and validates a configuration file, at start: any file that
// can be read. One that is not a regular file (/dev/stdin, a process
// substitution) cannot be read again: the configuration has no Path (a
// reload re-reads only its tenants_file), and a relative tenants_file is
// taken from the working directory, not from beside it.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, regfile.MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	fi, err := f.Stat()
	return load(path, data, err == nil && fi.Mode().IsRegular())
}

// Reload reads and validates a configuration file again while the gateway
// runs (a SIGHUP): only a regular file, so that a FIFO or device in its
// place is an error, not a read that waits (regfile).
func Reload(path string) (*Config, error) {
	data, err := regfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return load(path, data, true)
}

// load parses data, read from path; a file that can be read again (regular)
// is the configuration's Path, and a relative tenants_file lives beside it.
func load(path string, data []byte, again bool) (*Config, error) {
	if len(data) > regfile.MaxSize {
		return nil, fmt.Errorf("config %s: more than the %d bytes a configuration file may have", path, regfile.MaxSize)
	}
	c, err := Parse(bytes.NewReader(data))
	if err != nil {
		// Its error may quote a key pasted into the wrong field: the
		// digests of the file, and of the tenants file it names, find it.
		named := &Config{digests: digestsIn(data), TenantsFile: tenantsFileIn(data)}
		named.resolveTenantsFile(path, again)
		return nil, named.RedactErr(fmt.Errorf("config %s: %w", path, err))
	}
	if !again {
		// Read once (a pipe): its digests are kept for RedactKeys, which
		// reads a regular file again when an error needs them.
		c.digests = digestsIn(data)
	}
	c.resolveTenantsFile(path, again)
	asRead := *c
	c.asRead = &asRead
	return c, nil
}

// resolveTenantsFile sets Path, for a file that can be read again
// (regular), and puts a relative tenants_file beside it: it lives there,
// wherever the gateway was started from. Otherwise a relative
// tenants_file is taken from the working directory.
func (c *Config) resolveTenantsFile(path string, again bool) {
	if !again {
		return
	}
	c.Path = path
	if c.TenantsFile != "" && !filepath.IsAbs(c.TenantsFile) {
		c.TenantsFile = filepath.Join(filepath.Dir(path), c.TenantsFile)
	}
}

// Parse reads a configuration from r. Unknown keys are errors.
func Parse(r io.Reader) (*Config, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	c := &Config{}
	if len(bytes.TrimSpace(b)) == 0 {
		return c, nil
	}
	if err := cfgtypes.CheckDocument(b, c); err != nil {
		return nil, cfgtypes.NameField(b, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		return nil, cfgtypes.NameField(b, cfgtypes.CleanYAMLError(err))
	}
	if err := cfgtypes.NextDocument(dec); err != nil {
		return nil, err
	}
	if c.Upstream == "" {
		var probe struct {
			Upstream yaml.Node `yaml:"upstream"`
		}
		if yaml.Unmarshal(b, &probe) == nil && probe.Upstream.Kind != 0 {
			return nil, fmt.Errorf("line %d: %w", probe.Upstream.Line, ErrEmptyUpstream)
		}
	}
	if err := c.Validate(); err != nil {
		return nil, withLines(b, err)
	}
	return c, nil
}

// ErrEmptyUpstream is an upstream given as empty, as an unset variable
// leaves it: only an absent upstream starts the built-in simulator.
var ErrEmptyUpstream = errors.New("upstream: empty (an unset variable?): give the engine's URL, such as http://127.0.0.1:8000, or leave upstream out to run the built-in simulator")

// CheckUpstream catches the common mistakes in an upstream URL with a
// message that says what to do; the proxy checks the rest. A password in
// the URL is not quoted (urlredact).
func CheckUpstream(u string) error {
	if u == "" {
		return nil
	}
	if strings.TrimSpace(u) == "" {
		return ErrEmptyUpstream
	}
	if err := checkUpstream(u); err != nil {
		return urlredact.Err(u, err)
	}
	return nil
}

func checkUpstream(u string) error {
	if !strings.Contains(u, "://") {
		if scheme, rest, ok := strings.Cut(u, "//"); ok && strings.EqualFold(strings.TrimSuffix(scheme, ":"), "http") {
			// "http//engine": the colon after the scheme left out.
			return fmt.Errorf("upstream: %q is missing the colon after its scheme: http://%s", u, rest)
		}
		return fmt.Errorf("upstream: %q has no scheme: add http:// (http://%s)", u, u)
	}
	if scheme, rest, _ := strings.Cut(u, "://"); strings.EqualFold(scheme, "https") {
		return fmt.Errorf("upstream: %q: TLS to the upstream is not supported; reach the engine over plain http (http://%s), on the same host or a private network, or through a local TLS-terminating sidecar", u, rest)
	}
	// An OpenAI client's base URL ends in /v1: the client's path, /v1/...,
	// is sent as it came, so the engine is named without it.
	if p, err := url.Parse(u); err == nil && p.Host != "" && p.Path != "" && p.Path != "/" {
		if strings.Contains(p.Path+p.RawQuery+p.Fragment, "@") {
			// A password with a '/' in it ("user:p@ss/word@engine"):
			// the host url.Parse found is a piece of it, not to be named.
			return fmt.Errorf("upstream: %q: a path prefix is not supported; give the engine's base URL", u)
		}
		return fmt.Errorf("upstream: %q: a path prefix is not supported; give the engine's base URL (%s://%s)", u, p.Scheme, p.Host)
	}
	return nil
}

// Validate checks values a YAML type check cannot.
func (c *Config) Validate() error {
	if err := CheckUpstream(c.Upstream); err != nil {
		return err
	}
	if c.MaxBodyBytes < 0 {
		return fmt.Errorf("max_body_bytes: must not be negative, got %d", c.MaxBodyBytes)
	}
	if c.MaxBodyMemory < 0 {
		return fmt.Errorf("max_body_memory: must not be negative, got %d", c.MaxBodyMemory)
	}
	if c.MaxLagMemory < 0 {
		return fmt.Errorf("max_lag_memory: must not be negative, got %d", c.MaxLagMemory)
	}
	if maxBody := int64(c.MaxBodyBytes); c.MaxBodyMemory != 0 {
		if maxBody == 0 {
			maxBody = DefaultMaxBodyBytes
		}
		if c.MaxBodyMemory < maxBody {
			return fmt.Errorf("max_body_memory: %d is less than max_body_bytes (%d): no body of the largest size allowed could be held", c.MaxBodyMemory, maxBody)
		}
	}
	if c.MaxEventBytes != 0 && (c.MaxEventBytes < MinEventBytes || c.MaxEventBytes > MaxEventBytesLimit) {
		return fmt.Errorf("max_event_bytes: must be from %d (4 KiB) to %d (64 MiB), or 0 for the default 1 MiB; got %d", MinEventBytes, MaxEventBytesLimit, c.MaxEventBytes)
	}
	if c.MaxConnections < 0 {
		return fmt.Errorf("max_connections: must not be negative, got %d", c.MaxConnections)
	}
	if c.GCPercent < 0 {
		return fmt.Errorf("gc_percent: must not be negative, got %d (GOGC=off is not offered: a gateway that never collects runs out of memory)", c.GCPercent)
	}
	if c.ShutdownGrace < 0 {
		return fmt.Errorf("shutdown_grace: must not be negative, got %v", c.ShutdownGrace.D())
	}
	if c.Labels.MaxValues < 0 {
		return fmt.Errorf("labels.max_values: must not be negative, got %d", c.Labels.MaxValues)
	}
	if c.Labels.MaxPairs < 0 {
		return fmt.Errorf("labels.max_pairs: must not be negative, got %d", c.Labels.MaxPairs)
	}
	for _, l := range []struct {
		key    string
		values []string
		model  bool
	}{{"tenants", c.Labels.Tenants, false}, {"models", c.Labels.Models, true}} {
		for i, v := range l.values {
			if l.model && keyshape.HoldsWhole([]byte(v)) || !l.model && keyshape.Holds([]byte(v)) {
				// Not quoted: a key pasted here would be a label value.
				return fmt.Errorf("labels.%s[%d]: shaped like a gateway key (gp- and %s of its characters), and label values are written to the metrics: give the value itself (not shown here)", l.key, i, map[bool]string{true: "43 or more", false: "16 or more"}[l.model])
			}
			if !export.ValidLabel(v) {
				return fmt.Errorf("labels.%s[%d]: %s cannot be a label value: want 1 to %d bytes of UTF-8 without control or format characters (bidi overrides, zero-width spaces and other invisible ones)", l.key, i, quoteCut(v, export.MaxLabelBytes), export.MaxLabelBytes)
			}
			if export.Reserved(v, l.model) {
				return fmt.Errorf("labels.%s[%d]: %q is reserved: the gateway's label for what no label holds (%s), for a request without a model (%s) or for one whose model was not read (%s)", l.key, i, v, export.Other, export.None, export.Unread)
			}
		}
	}
	if keyshape.HoldsWhole([]byte(c.Sim.Model)) {
		// The simulator lists its model to every client (/v1/models).
		return errors.New("sim.model: a model name that holds a whole gateway key (gp- and 43 or more of its characters): the simulator lists its model to every client (not shown here)")
	}
	if err := checkListen("listen", c.Listen, false); err != nil {
		return err
	}
	if err := checkListen("admin_listen", c.AdminListen, true); err != nil {
		return err
	}
	switch c.LogFormat {
	case "", "text", "json":
	default:
		return fmt.Errorf("log_format: %q is neither text nor json", c.LogFormat)
	}
	switch strings.ToLower(c.LogLevel) {
	case "", "debug", "info", "warn", "warning", "error":
	default:
		return fmt.Errorf("log_level: %q is not one of debug, info, warn, error", c.LogLevel)
	}
	if c.TenantHeader != "" && !headerName(c.TenantHeader) {
		// A name no request can carry (the gateway refuses a header
		// whose name is not an HTTP token): every request was the
		// tenant default, without a word.
		return fmt.Errorf("tenant_header: %q is not a header name (want letters, digits and !#$%%&'*+-.^_`|~)", c.TenantHeader)
	}
	if keyshape.CredentialHeader(c.TenantHeader) {
		return fmt.Errorf("tenant_header: %s carries credentials: each client's key would be its tenant, in every record, metric and log", c.TenantHeader)
	}
	var errs []error
	if len(c.Tenants) > 0 && c.TenantsFile != "" {
		errs = append(errs, errors.New("tenants_file: set either tenants or tenants_file, not both"))
	}
	errs = append(errs, ratelimit.ValidateTenants(c.Tenants), c.RateLimit.Validate(), c.SLO.Validate(), c.OTel.Validate())
	if c.DefaultSLO != "" && c.SLO.SLOs[c.DefaultSLO] == nil {
		errs = append(errs, fmt.Errorf("default_slo: %q is not one of the classes in slos", c.DefaultSLO))
	}
	errs = append(errs, CheckTenantClasses(c.Tenants, c.SLO.SLOs, c.DefaultSLO))
	// At most cfgtypes.MaxErrors in all (10,000 classes each wrong in
	// four ways, 467 KB, made 2.4 MB of errors).
	var all cfgtypes.Errors
	for _, err := range errs {
		all.Add(err)
	}
	return all.Err()
}

// headerName reports whether s is an HTTP header name: a token (RFC 9110,
// 5.1 and 5.6.2).
func headerName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// quoteCut quotes v, its first max bytes when it is longer, and then not
// within a run of a key's characters of both cases: the part of a key
// pasted there before the cut would be too short for RedactKeys to find.
func quoteCut(v string, max int) string {
	if len(v) <= max {
		return strconv.Quote(v)
	}
	cut := max
	if keyshape.IsBase64URL(v[cut]) {
		// The run of a key's characters the cut falls in: a key's part
		// after gp- holds letters of both cases (identity.NewKey).
		rs, re := cut, cut
		for rs > 0 && keyshape.IsBase64URL(v[rs-1]) {
			rs--
		}
		for re < len(v) && keyshape.IsBase64URL(v[re]) {
			re++
		}
		run := v[rs:re]
		if strings.ContainsFunc(run, unicode.IsUpper) && strings.ContainsFunc(run, unicode.IsLower) {
			cut = rs
		}
	}
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut-- // not within a character
	}
	return strconv.Quote(v[:cut]) + "…"
}

// KeysEnabled reports whether gateway keys are required.
func (c *Config) KeysEnabled() bool { return len(c.Tenants) > 0 || c.TenantsFile != "" }

// CheckTenantClasses checks that every class a tenant names exists, and
// every shape its slo_by_shape names is one (slo.CheckShape).
func CheckTenantClasses(tenants []ratelimit.TenantConfig, classes map[string]*slo.Class, def string) error {
	var errs cfgtypes.Errors // at most cfgtypes.MaxErrors, and the count of the others
	check := func(path, name string) {
		if name != "" && classes[name] == nil {
			errs.Add(fmt.Errorf("%s: %q is not one of the classes in slos", path, name))
		}
	}
	// A class named by one of the tenants' keys, of the operator's own
	// form (a gp- one is refused by its shape, slo.Config.Validate):
	// class names are written to the metrics, the admin API and the
	// request log.
	keys := map[[sha256.Size]byte]bool{}
	for _, t := range tenants {
		for _, k := range t.Keys {
			if len(k.SHA256) != 2*sha256.Size {
				continue // ValidateTenants refuses it (hex.Decode would write past d)
			}
			var d [sha256.Size]byte
			if _, err := hex.Decode(d[:], []byte(strings.ToLower(k.SHA256))); err == nil {
				keys[d] = true
			}
		}
	}
	if len(keys) > 0 {
		for name := range classes {
			if keys[sha256.Sum256([]byte(name))] && !keyshape.Holds([]byte(name)) {
				errs.Add(errors.New("slos: a class name is one of the tenants' gateway keys, and class names are written to the metrics, the admin API and the request log: give it a name instead (not shown here)"))
			}
		}
	}
	for i, t := range tenants {
		check(fmt.Sprintf("tenants[%d].slo", i), t.SLO)
		for _, m := range slices.Sorted(maps.Keys(t.SLOByModel)) { // the errors in one order
			check(fmt.Sprintf("tenants[%d].slo_by_model.%s", i, m), t.SLOByModel[m])
		}
		for _, sh := range slices.Sorted(maps.Keys(t.SLOByShape)) {
			if err := slo.CheckShape(sh); err != nil {
				errs.Add(fmt.Errorf("tenants[%d].slo_by_shape.%s: %w", i, sh, err))
			}
			check(fmt.Sprintf("tenants[%d].slo_by_shape.%s", i, sh), t.SLOByShape[sh])
		}
		if t.SLO == "" && def == "" && (len(t.SLOByModel) > 0 || len(t.SLOByShape) > 0) {
			errs.Add(fmt.Errorf("tenants[%d].slo: overrides need a class: set slo or default_slo", i))
		}
	}
	return errs.Err()
}

// TenantClasses converts the tenants' SLO settings for the judge.
func TenantClasses(tenants []ratelimit.TenantConfig) []slo.TenantClasses {
	out := make([]slo.TenantClasses, len(tenants))
	for i, t := range tenants {
		out[i] = slo.TenantClasses{Name: t.Name, Class: t.SLO, ByModel: t.SLOByModel, ByShape: t.SLOByShape}
	}
	return out
}

// LoadTenants returns the tenants of c: its own list, or its tenants file.
func (c *Config) LoadTenants() ([]ratelimit.TenantConfig, error) {
	if c.TenantsFile == "" {
		return c.Tenants, nil
	}
	ts, err := identity.LoadTenantsFile(c.TenantsFile)
	if err != nil {
		if bare := bareListError(c.TenantsFile); bare != nil {
			return nil, c.RedactErr(bare)
		}
		if inner := errors.Unwrap(err); inner != nil {
			// "path: tenants[1].name: ...": the line, as for tenants
			// written in the configuration.
			err = fmt.Errorf("%s: %w", c.TenantsFile, c.tenantsFileLines(inner))
		}
		return nil, c.RedactErr(fmt.Errorf("tenants_file: %w", err))
	}
	if err := CheckTenantClasses(ts, c.SLO.SLOs, c.DefaultSLO); err != nil {
		return nil, c.RedactErr(fmt.Errorf("tenants_file %s: %w", c.TenantsFile, c.tenantsFileLines(err)))
	}
	return ts, nil
}

// tenantsFileLines puts the line in the tenants file before each error of
// err that names a key path of it (withLines).
func (c *Config) tenantsFileLines(err error) error {
	src, rerr := regfile.ReadFile(c.TenantsFile)
	if rerr != nil {
		return err
	}
	return withLines(src, err)
}
