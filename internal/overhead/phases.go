package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

// --phases: goodput's own time per step of a request's way in and of its
// first event, from a goodput built with -tags phases (internal/phases).
// Such a build, given GOODPUT_PHASES (a file), writes the file at start
// ({"seq":0}) and at each SIGUSR1 replaces it with the figures of the
// durations recorded since the signal before, its seq one higher: the
// round signals at its window's two edges and keeps the second.

// phaseFigure is one step's durations over a round's window (µs).
type phaseFigure struct {
	Name string `json:"name"`
	N    int    `json:"n"`
	P10  num    `json:"p10_us"`
	P50  num    `json:"p50_us"`
	P90  num    `json:"p90_us"`
	P99  num    `json:"p99_us"`
}

// phaseDump is the file a phases build writes.
type phaseDump struct {
	Seq    int           `json:"seq"`
	Phases []phaseFigure `json:"phases"`
}

// errNoPhases: the binary did not write the file at start.
var errNoPhases = errors.New("goodput wrote no phases file: it was not built with -tags phases (--phases builds it so when --goodput-bin is not given)")

func readPhases(path string) (phaseDump, error) {
	var d phaseDump
	b, err := os.ReadFile(path)
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// signalPhases asks the process pid for its figures (SIGUSR1) and waits
// for the file at path to hold a seq past after; it returns them.
func signalPhases(pid int, path string, after int) (phaseDump, error) {
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return phaseDump{}, err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err := readPhases(path)
		if err == nil && d.Seq > after {
			return d, nil
		}
		if time.Now().After(deadline) {
			return d, fmt.Errorf("the phases file did not pass seq %d within 5 s (%v)", after, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// printPhases prints, per stream count, each step's p50, p90 and p99 (medians
// of rounds) for each target that has them.
func printPhases(w io.Writer, rounds []roundResult, streams []int, targets []target) {
	var with []target
	for _, t := range targets {
		if t.phases {
			with = append(with, t)
		}
	}
	if len(with) == 0 {
		return
	}
	labels := make([]string, len(with))
	for i, t := range with {
		labels[i] = t.label
	}
	fmt.Fprintln(w, "\nWhere the gateway's own time goes (--phases): each step of a request's way in, from t0 (its head read) to its write upstream, then its first event's, from its read to its write to the client; µs, p50 (p90, p99), medians of rounds.")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| streams | step | %s |\n", strings.Join(labels, " | "))
	fmt.Fprintf(w, "| ---: | --- |%s\n", strings.Repeat(" ---: |", len(with)))
	for _, n := range streams {
		var names []string // in the order the builds name them
		for _, r := range rounds {
			if r.Streams != n {
				continue
			}
			for _, f := range r.Phases {
				if !slices.Contains(names, f.Name) {
					names = append(names, f.Name)
				}
			}
		}
		for _, name := range names {
			cells := make([]string, len(with))
			for i, t := range with {
				var p50, p90, p99 []float64
				for _, r := range rounds {
					if r.Streams != n || r.Target != t.name {
						continue
					}
					for _, f := range r.Phases {
						if f.Name == name {
							p50 = append(p50, float64(f.P50))
							p90 = append(p90, float64(f.P90))
							p99 = append(p99, float64(f.P99))
						}
					}
				}
				cells[i] = num(median(p50)).fmt(1) + " (" + num(median(p90)).fmt(1) + ", " + num(median(p99)).fmt(1) + ")"
			}
			fmt.Fprintf(w, "| %d | %s | %s |\n", n, name, strings.Join(cells, " | "))
		}
	}
}
