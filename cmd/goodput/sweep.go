package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/goodput/goodput/bench"
	"github.com/goodput/goodput/bench/sweep"
)

// sweepFlags are goodput bench's sweep flags (--sweep, --report,
// --sweep-objective), registered on bench's flag set.
type sweepFlags struct {
	spec, report *string
	objective    *float64
}

// sweepArgs are the sweep settings, checked; nil without --sweep.
type sweepArgs struct {
	ladder    sweep.Ladder
	report    string
	objective float64
}

func addSweepFlags(fs *flag.FlagSet) *sweepFlags {
	return &sweepFlags{
		spec: fs.String("sweep", "", "capacity sweep: KIND=V1,V2,… with KIND request-rate, max-concurrency or concurrency (e.g. request-rate=1,2,4,8,16);"+
			" each step is a whole run with the other flags; prints a table, writes every step to --result and an HTML report"),
		report:    fs.String("report", "", "sweep: the HTML report's file (default: the --result file with .html)"),
		objective: fs.Float64("sweep-objective", sweep.DefaultObjective, "sweep: attainment objective; the first step below it is the knee at the latest (0: not checked)"),
	}
}

// sweepExcludes are the flags a sweep of each kind sets itself.
var sweepExcludes = map[sweep.Kind][]string{
	sweep.RequestRate:    {"request-rate", "concurrency"},
	sweep.MaxConcurrency: {"max-concurrency", "concurrency"},
	sweep.Concurrency:    {"concurrency", "request-rate", "burstiness", "max-concurrency"},
}

// check reads the sweep flags; set holds the flags given.
func (f *sweepFlags) check(set map[string]bool) (*sweepArgs, error) {
	if !set["sweep"] {
		for _, n := range []string{"report", "sweep-objective"} {
			if set[n] {
				return nil, fmt.Errorf("--%s needs --sweep", n)
			}
		}
		return nil, nil
	}
	l, err := sweep.ParseLadder(*f.spec)
	if err != nil {
		return nil, fmt.Errorf("--sweep: %v", err)
	}
	for _, n := range sweepExcludes[l.Kind] {
		if set[n] {
			return nil, fmt.Errorf("--sweep %s sets each step's load: it excludes --%s", l.Kind, n)
		}
	}
	if o := *f.objective; math.IsNaN(o) || o < 0 || o > 1 {
		return nil, fmt.Errorf("--sweep-objective %v: want a fraction from 0 to 1 (0.99: 99%%)", o)
	}
	return &sweepArgs{ladder: l, report: *f.report, objective: *f.objective}, nil
}

// reportPath is where the HTML report goes: --report, else the result
// file with .html, else nowhere.
func (s *sweepArgs) reportPath(result string) string {
	if s.report != "" || result == "" {
		return s.report
	}
	return strings.TrimSuffix(result, filepath.Ext(result)) + ".html"
}

// runSweep runs goodput bench --sweep: every step's vLLM-style summary as it
// ends, then the table of steps with the knee; the result file and the
// HTML report.
func runSweep(ctx context.Context, a *benchArgs, stdout, stderr io.Writer) int {
	s := a.sweep
	n := len(s.ladder.Values)
	o := sweep.Options{Bench: a.opts, Ladder: s.ladder, Rule: sweep.Rule{Objective: s.objective}}
	o.OnStep = func(i int, st *sweep.Step, r *bench.Result) {
		fmt.Fprintf(stdout, "Step %d/%d: %s %s\n", i+1, n, st.Kind, st.Load)
		if r != nil {
			bench.WriteSummary(stdout, r, a.metrics, a.percentiles)
			listErrors(stderr, r)
		}
		fmt.Fprintln(stdout, sweep.StepLine(st, i, n))
		fmt.Fprintln(stdout)
	}
	res, err := sweep.Run(ctx, o)
	if res == nil {
		if ctx.Err() != nil {
			return benchFail(stderr, 1, "the sweep was stopped (%v) during its first step: no step ran, nothing written", err)
		}
		return benchFail(stderr, 1, "%v", err)
	}
	fmt.Fprintf(stdout, "Capacity sweep %s (latencies in ms)\n", res.Ladder)
	if werr := sweep.WriteTable(stdout, &res.Sweep); werr != nil {
		return benchFail(stderr, 1, "%v", werr)
	}
	if res.Stopped != "" {
		fmt.Fprintf(stderr, "goodput bench: %s\n", res.Stopped)
	} else if err != nil {
		fmt.Fprintf(stderr, "goodput bench: the sweep stopped early (%v): %d of %d steps ran\n", err, len(res.Steps), n)
	}
	if a.result != "" {
		if werr := res.WriteFile(a.result); werr != nil {
			return benchFail(stderr, 1, "writing the result: %v", werr)
		}
		fmt.Fprintf(stderr, "goodput bench: sweep result written to %s\n", a.result)
	}
	if path := s.reportPath(a.result); path != "" {
		if werr := writeSweepReport(path, &res.Sweep); werr != nil {
			return benchFail(stderr, 1, "writing the report: %v", werr)
		}
		fmt.Fprintf(stderr, "goodput bench: sweep report written to %s\n", path)
	}
	completed := 0
	for _, st := range res.Steps {
		completed += st.Completed
	}
	if err != nil || completed == 0 {
		return 1
	}
	return 0
}

func writeSweepReport(path string, s *sweep.Sweep) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(sweep.WriteHTML(f, s), f.Close())
}
