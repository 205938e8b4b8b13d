package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/goodput/goodput/internal/keyshape"
)

// newLogger returns the gateway's logger for its own messages (not the
// request log): log/slog records, as text (key=value) or JSON lines, of at
// least the given level, on w. The callers keep their Printf style: the
// returned *log.Logger turns each message into one record, whose level the
// message tells (see messageLevel).
func newLogger(w io.Writer, format, level string) (*log.Logger, error) {
	min, err := parseLogLevel(level)
	if err != nil {
		return nil, err
	}
	// Every level passes the inner handler: printfHandler filters, once
	// it has read the message's level.
	opts := &slog.HandlerOptions{Level: slog.LevelDebug}
	var h slog.Handler
	switch format {
	case "", "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("log_format: %q is neither text nor json", format)
	}
	return slog.NewLogLogger(printfHandler{h: h, min: min}, slog.LevelInfo), nil
}

// parseLogLevel reads debug, info (the default), warn or error.
func parseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("log_level: %q is not one of debug, info, warn, error", s)
}

// printfHandler gives each Printf-style message its level (messageLevel),
// then passes those of at least min to h.
type printfHandler struct {
	h   slog.Handler
	min slog.Level
}

func (p printfHandler) Enabled(context.Context, slog.Level) bool { return true }

func (p printfHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level, r.Message = messageLevel(r.Message)
	if r.Level < p.min {
		return nil
	}
	// A gateway key never reaches the log: one pasted in the wrong field of
	// a tenants file is quoted by the reload's error (keyshape.RedactWhole
	// finds what is shaped like a whole one, and leaves a host or a file
	// named gp-something; it allocates nothing when there is none).
	r.Message = keyshape.RedactWhole(r.Message)
	return p.h.Handle(ctx, r)
}

func (p printfHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return printfHandler{h: p.h.WithAttrs(as), min: p.min}
}

func (p printfHandler) WithGroup(name string) slog.Handler {
	return printfHandler{h: p.h.WithGroup(name), min: p.min}
}

// recoveryClause reports whether msg's first clause (up to the first ";")
// ends with, or holds only before any parenthesis, the words w: "upstream
// http://e answers again", "ratelimit: redis [a] answers again after 2s;
// ...".
func recoveryClause(msg, w string) bool {
	first, _, _ := strings.Cut(msg, ";")
	if i := strings.IndexByte(first, '('); i >= 0 {
		first = first[:i]
	}
	return strings.Contains(first, w)
}

// messageLevel reads a message's level: "DEBUG: ", "WARNING: " and
// "ERROR: " prefixes say it (and are dropped); a recovered panic is an
// error; one saying that something works again (answers, writes or
// accepts again) is information; one saying
// that something fails, failed or could not be done, that records were
// dropped or requests cut, or that a limit is reached, is a warning; the
// rest is information.
func messageLevel(msg string) (slog.Level, string) {
	for _, p := range []struct {
		prefix string
		level  slog.Level
	}{{"DEBUG: ", slog.LevelDebug}, {"WARNING: ", slog.LevelWarn}, {"ERROR: ", slog.LevelError}} {
		if rest, ok := strings.CutPrefix(msg, p.prefix); ok {
			return p.level, rest
		}
	}
	if strings.Contains(msg, ": panic") {
		return slog.LevelError, msg
	}
	// Back to normal, in the gateway's own words where they stand: never
	// from words an error quoted in a warning holds (a Redis replica's
	// READONLY says "against", a tenants file may name a field "try
	// again", a path may be anything).
	if strings.HasPrefix(msg, "request log: writing again") || strings.HasPrefix(msg, "accepting connections again") ||
		((strings.HasPrefix(msg, "upstream ") || strings.HasPrefix(msg, "ratelimit: redis ")) && recoveryClause(msg, " answers again")) {
		return slog.LevelInfo, msg
	}
	for _, w := range []string{"fail", "could not", "not written", "dropped", "cutting", "without a record", "reached"} {
		if strings.Contains(msg, w) {
			return slog.LevelWarn, msg
		}
	}
	return slog.LevelInfo, msg
}
