package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/sim"
)

func cmdSim(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8000", "listen address")
	model := fs.String("model", "", "model name served (default sim-llama)")
	var ttft, itl, perTok cfgtypes.Duration
	fs.Var(&ttft, "ttft", "time to first token (default: the simulator's)")
	fs.Var(&itl, "itl", "gap between tokens (default: the simulator's)")
	fs.Var(&perTok, "ttft-per-prompt-token", "extra TTFT per prompt token (TTFT grows with prompt length)")
	maxTokens := fs.Int("default-max-tokens", 0, "tokens generated when a request sets no max_tokens (default: the simulator's)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	logger := log.New(stderr, "", log.LstdFlags|log.Lmicroseconds)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "goodput sim:", err)
		return 1
	}
	s := sim.New(sim.Config{Model: *model, TTFT: ttft.D(), ITL: itl.D(), TTFTPerPromptToken: perTok.D(), DefaultMaxTokens: *maxTokens})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	logger.Printf("goodput sim: OpenAI-compatible simulator listening on http://%s", ln.Addr())
	select {
	case <-ctx.Done():
		_ = s.Shutdown()
		return 0
	case err := <-done:
		if err != nil {
			logger.Printf("goodput sim: %v", err)
			return 1
		}
		return 0
	}
}
