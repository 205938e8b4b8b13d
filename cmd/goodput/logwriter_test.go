package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// gateWriter is a log output that does not take writes until opened.
type gateWriter struct {
	entered chan struct{}
	open    chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
}

func (g *gateWriter) Write(p []byte) (int, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

// A log output that does not take writes (a container runtime's log driver
// in blocking mode, a pipe whose reader stopped) holds up nobody who logs:
// the lines beyond the bound are dropped, and a line says how many once the
// output takes writes again. Lines that were kept come out whole, in order.
func TestLogWriterNeverWaits(t *testing.T) {
	g := &gateWriter{entered: make(chan struct{}, 1), open: make(chan struct{})}
	lw := newLogWriter(g, "text", 100)
	logger, err := newLogger(lw, "text", "info")
	if err != nil {
		t.Fatal(err)
	}
	logger.Printf("first")
	<-g.entered // the writer is stuck on "first"
	done := make(chan struct{})
	go func() {
		for i := 0; i < 1000; i++ {
			logger.Printf("line %d", i)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("logging waited on an output that does not take writes")
	}
	close(g.open)
	lw.Close(10 * time.Second)
	out := g.buf.String()
	if !strings.Contains(out, "msg=first") || !strings.Contains(out, "log lines were dropped") {
		t.Fatalf("output %q: want the first line and a count of the dropped ones", out)
	}
	var kept, dropped int
	fmt.Sscanf(out[strings.Index(out, "level=WARN msg=\"")+len("level=WARN msg=\""):], "%d", &dropped)
	kept = strings.Count(out, "msg=\"line ")
	if kept+dropped != 1000 || kept == 0 {
		t.Fatalf("%d lines kept and %d dropped, want 1000 in all", kept, dropped)
	}
	if strings.Index(out, "log lines were dropped") < strings.LastIndex(out, "msg=\"line ") {
		t.Fatalf("the count of dropped lines comes before lines kept: %q", out)
	}
	if !strings.Contains(out, "msg=\"line 0\"") {
		t.Fatalf("the first lines after the stuck one were not the ones kept: %q", out)
	}
}
