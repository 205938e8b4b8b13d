package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/goodput/goodput/report"
)

const reportUsage = `usage: goodput report --tenant NAME (--admin URL | --prometheus URL) [flags]

Writes the SLO report of one tenant over a period: objective and SLO class,
attainment, error budget used and remaining, goodput, throughput, latency
percentiles, the worst hours and the shape of the traffic.

Sources:
  --admin URL        one gateway's admin listener (e.g. http://127.0.0.1:9090):
                     its live view has rolling 5m, 1h and 24h windows ending
                     now, and counts that replica only
  --prometheus URL   a Prometheus server that scrapes every gateway replica

Times (--from, --to): now, relative like -24h, -90m, -7d, -1d12h, an RFC 3339
time like 2026-01-05T10:00:00Z, or a date like 2026-01-05 (midnight UTC).

Flags:
`

// reportFormats maps --format values and --out extensions to a format.
var reportFormats = map[string]string{
	"md": "md", "markdown": "md", "html": "html", "htm": "html", "json": "json",
}

// cmdReport: `goodput report --tenant acme --from -24h --to now
// (--admin URL | --prometheus URL) [--format md|html|json] [--out file]`.
func cmdReport(args []string, stdout, stderr io.Writer) int {
	a, code := parseReportArgs(args, stderr)
	if a == nil {
		return code
	}
	r, err := a.fetch()
	if err != nil {
		return reportFail(stderr, 1, "%v", err)
	}
	if n := float64(r.SLO.Requests); !(n > 0) {
		// Not an error (a quiet tenant is a valid report), but a misspelt
		// name looks just the same: say so; unless the tenant had
		// requests, none judged, when it is the gateway's SLO classes
		// that are missing.
		if arrived := float64(r.Traffic.Arrivals); arrived > 0 {
			fmt.Fprintf(stderr, "goodput report: warning: tenant %q had %s requests in the period and none was judged: no SLO class applies to them (slos: and default_slo in the gateway's configuration), or each was a client error or refused, which are not judged\n", a.tenant, strconv.FormatFloat(arrived, 'f', -1, 64))
		} else {
			fmt.Fprintf(stderr, "goodput report: warning: no judged request of tenant %q in the period; check the name\n", a.tenant)
		}
	}
	if err := a.write(r, stdout); err != nil {
		return reportFail(stderr, 1, "%v", err)
	}
	return 0
}

func reportFail(stderr io.Writer, code int, format string, a ...any) int {
	fmt.Fprintf(stderr, "goodput report: "+format+"\n", a...)
	return code
}

// reportArgs are the report command's settings, checked.
type reportArgs struct {
	tenant     string
	base       string // the source's base URL
	prometheus bool   // the source is Prometheus, else an admin API
	from, to   time.Time
	now        time.Time
	worst      int
	timeout    time.Duration
	kind       string // md, html or json
	out        string // file to write; empty: standard output
}

// parseReportArgs parses and checks the flags. A nil result comes with the
// exit code: 0 after -h, 2 for a usage error (said on stderr).
func parseReportArgs(args []string, stderr io.Writer) (*reportArgs, int) {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), reportUsage)
		fs.PrintDefaults()
	}
	tenant := fs.String("tenant", "", "tenant to report on (required)")
	fromS := fs.String("from", "-24h", "start of the period")
	toS := fs.String("to", "now", "end of the period")
	adminURL := fs.String("admin", "", "base URL of one gateway's admin listener")
	promURL := fs.String("prometheus", "", "base URL of a Prometheus server scraping the gateways")
	format := fs.String("format", "", "md, html or json (default: from the --out file's extension, else md)")
	out := fs.String("out", "", "file to write (default: standard output)")
	timeout := fs.Duration("timeout", 60*time.Second, "time limit for reading the source")
	worst := fs.Int("worst", report.DefaultWorst, "how many worst hours to list")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0
		}
		return nil, 2
	}
	if fs.NArg() > 0 {
		return nil, reportFail(stderr, 2, "unexpected argument %q (every setting is a flag; see goodput report -h)", fs.Arg(0))
	}
	a := &reportArgs{tenant: *tenant, worst: *worst, timeout: *timeout, out: *out, now: time.Now()}
	if err := a.check(*adminURL, *promURL, *format, *fromS, *toS); err != nil {
		return nil, reportFail(stderr, 2, "%v", err)
	}
	return a, 0
}

// check checks the settings and fills the source, the format and the
// period.
func (a *reportArgs) check(adminURL, promURL, format, fromS, toS string) error {
	if a.tenant == "" {
		return errors.New("--tenant is required")
	}
	if (adminURL == "") == (promURL == "") {
		return errors.New("give exactly one source: --admin URL (one gateway's admin listener) or --prometheus URL")
	}
	if a.worst < 1 {
		return fmt.Errorf("--worst must be at least 1, got %d", a.worst)
	}
	if a.timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", a.timeout)
	}
	a.kind = "md"
	if format != "" {
		k, ok := reportFormats[strings.ToLower(format)]
		if !ok {
			return fmt.Errorf("--format %q: want md, html or json", format)
		}
		a.kind = k
	} else if ext := strings.TrimPrefix(filepath.Ext(a.out), "."); ext != "" {
		k, ok := reportFormats[strings.ToLower(ext)]
		if !ok {
			// Markdown in report.pdf would be a file no reader opens.
			return fmt.Errorf("--out %q: no report format has the extension .%s: want .md, .html or .json, or give --format", a.out, ext)
		}
		a.kind = k
	}
	var err error
	if a.from, err = report.ParseTime(fromS, a.now); err != nil {
		return fmt.Errorf("--from: %v", err)
	}
	if a.to, err = report.ParseTime(toS, a.now); err != nil {
		return fmt.Errorf("--to: %v", err)
	}
	if !a.from.Before(a.to) {
		return fmt.Errorf("--from (%s) must be before --to (%s)", a.from.UTC().Format(time.RFC3339), a.to.UTC().Format(time.RFC3339))
	}
	src, base := "--admin", adminURL
	if promURL != "" {
		src, base = "--prometheus", promURL
		a.prometheus = true
	}
	if _, err := report.BaseURL(base); err != nil {
		return fmt.Errorf("%s: %v", src, err)
	}
	a.base = base
	return nil
}

// fetch builds the report from its source, within the timeout.
func (a *reportArgs) fetch() (*report.Report, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	defer transport.CloseIdleConnections()
	q := report.Query{Tenant: a.tenant, From: a.from, To: a.to, Now: a.now, Worst: a.worst, Client: &http.Client{Transport: transport}}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	var r *report.Report
	var err error
	if a.prometheus {
		r, err = report.FromPrometheus(ctx, a.base, q)
	} else {
		r, err = report.FromAdmin(ctx, a.base, q)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("%v (--timeout %s)", err, a.timeout)
	}
	return r, err
}

// write renders the report in its format to the --out file or stdout.
func (a *reportArgs) write(r *report.Report, stdout io.Writer) error {
	var buf bytes.Buffer
	var err error
	switch a.kind {
	case "html":
		err = r.HTML(&buf)
	case "json":
		err = r.JSON(&buf)
	default:
		err = r.Markdown(&buf)
	}
	if err != nil {
		return fmt.Errorf("rendering the report: %v", err)
	}
	if a.out == "" {
		if _, err := stdout.Write(buf.Bytes()); err != nil {
			return fmt.Errorf("writing the report: %v", err)
		}
		return nil
	}
	if err := os.WriteFile(a.out, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--out: %v", err)
	}
	return nil
}
