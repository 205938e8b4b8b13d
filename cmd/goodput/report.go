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
			return 0
		}
		return 2
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "goodput report: "+format+"\n", a...)
		return code
	}
	if fs.NArg() > 0 {
		return fail(2, "unexpected argument %q (every setting is a flag; see goodput report -h)", fs.Arg(0))
	}
	if *tenant == "" {
		return fail(2, "--tenant is required")
	}
	if (*adminURL == "") == (*promURL == "") {
		return fail(2, "give exactly one source: --admin URL (one gateway's admin listener) or --prometheus URL")
	}
	if *worst < 1 {
		return fail(2, "--worst must be at least 1, got %d", *worst)
	}
	if *timeout <= 0 {
		return fail(2, "--timeout must be positive, got %s", *timeout)
	}
	kind := "md"
	if *format != "" {
		k, ok := reportFormats[strings.ToLower(*format)]
		if !ok {
			return fail(2, "--format %q: want md, html or json", *format)
		}
		kind = k
	} else if *out != "" {
		if k, ok := reportFormats[strings.ToLower(strings.TrimPrefix(filepath.Ext(*out), "."))]; ok {
			kind = k
		}
	}
	now := time.Now()
	from, err := report.ParseTime(*fromS, now)
	if err != nil {
		return fail(2, "--from: %v", err)
	}
	to, err := report.ParseTime(*toS, now)
	if err != nil {
		return fail(2, "--to: %v", err)
	}
	if !from.Before(to) {
		return fail(2, "--from (%s) must be before --to (%s)", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	src, base := "--admin", *adminURL
	if *promURL != "" {
		src, base = "--prometheus", *promURL
	}
	if _, err := report.BaseURL(base); err != nil {
		return fail(2, "%s: %v", src, err)
	}

	transport := http.DefaultTransport.(*http.Transport).Clone()
	defer transport.CloseIdleConnections()
	q := report.Query{Tenant: *tenant, From: from, To: to, Now: now, Worst: *worst, Client: &http.Client{Transport: transport}}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var r *report.Report
	if *promURL != "" {
		r, err = report.FromPrometheus(ctx, base, q)
	} else {
		r, err = report.FromAdmin(ctx, base, q)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fail(1, "%v (--timeout %s)", err, *timeout)
		}
		return fail(1, "%v", err)
	}

	var buf bytes.Buffer
	switch kind {
	case "html":
		err = r.HTML(&buf)
	case "json":
		err = r.JSON(&buf)
	default:
		err = r.Markdown(&buf)
	}
	if err != nil {
		return fail(1, "rendering the report: %v", err)
	}
	if *out == "" {
		if _, err := stdout.Write(buf.Bytes()); err != nil {
			return fail(1, "writing the report: %v", err)
		}
		return 0
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		return fail(1, "--out: %v", err)
	}
	return 0
}
