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
	"strconv"
	"strings"
	"syscall"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/sim"
)

// defaultPreset is the batching engine of `goodput sim --mode batching`
// without --preset.
const defaultPreset = "small-gpu"

func cmdSim(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: goodput sim [flags]\n\nServes a simulated OpenAI-compatible engine (chat, completions, the Responses API and\nAnthropic's Messages API; streamed or not)\nwith a scripted timeline, for trying the gateway and for tests.\n\nFlags:")
		fs.PrintDefaults()
	}
	listen := fs.String("listen", "127.0.0.1:8000", "listen address")
	model := fs.String("model", "", "model name served (default sim-llama)")
	var ttft, itl, perTok cfgtypes.Duration
	fs.Var(&ttft, "ttft", "linear mode: time to first token (default 0: the first token at once; serve's built-in simulator uses 100ms)")
	fs.Var(&itl, "itl", "linear mode: gap between tokens (default 0: every token at once; serve's built-in simulator uses 20ms)")
	fs.Var(&perTok, "ttft-per-prompt-token", "linear mode: extra TTFT per prompt token (TTFT grows with prompt length)")
	maxTokens := fs.Int("default-max-tokens", 0, "tokens generated when a request sets no max_tokens (default: the simulator's)")
	modelLen := fs.Int("max-model-len", 0, "the model's context in tokens: a request whose prompt and max_tokens exceed it is refused (400), as vLLM does (default 131072)")
	mode := fs.String("mode", "linear", "linear (every request alone, on its own schedule) or batching (a continuous-batching engine model)")
	preset := fs.String("preset", "", "batching engine preset (implies --mode batching): "+strings.Join(sim.PresetNames(), ", ")+" (default "+defaultPreset+")")
	maxSeqs := fs.Int("max-num-seqs", 0, "batching: requests running at once (default: the preset's)")
	kvTokens := fs.Int("kv-cache-tokens", 0, "batching: KV cache capacity in tokens (default: the preset's)")
	batched := fs.Int("max-num-batched-tokens", 0, "batching: tokens computed per engine step (default: the preset's)")
	var stepBase, prefillTok, decodeSeq cfgtypes.Duration
	fs.Var(&stepBase, "step-base", "batching: fixed cost of an engine step (default: the preset's)")
	fs.Var(&prefillTok, "prefill-per-token", "batching: step cost per prompt token (default: the preset's)")
	fs.Var(&decodeSeq, "decode-per-seq", "batching: step cost per decoding request (default: the preset's)")
	seed := fs.Int64("seed", 0, "seed of the output text, request ids and the batching engine's step jitter")
	capacity := fs.String("capacity", "", "ISL,OSL: print the batching engine's predicted capacity for that workload and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "goodput sim: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	ctxLen := *modelLen
	if ctxLen == 0 {
		ctxLen = 131072 // the simulator's
	}
	if *maxTokens < 0 || *modelLen < 0 || *maxTokens > ctxLen {
		fmt.Fprintf(stderr, "goodput sim: --default-max-tokens %d and --max-model-len %d: want neither negative, and the default output limit within the context\n", *maxTokens, *modelLen)
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	batching := *mode == "batching" || set["preset"] || set["capacity"]
	switch {
	case *mode != "linear" && *mode != "batching":
		fmt.Fprintf(stderr, "goodput sim: --mode %q: want linear or batching\n", *mode)
		return 2
	case set["mode"] && *mode == "linear" && (set["preset"] || set["capacity"]):
		fmt.Fprintln(stderr, "goodput sim: --preset and --capacity need --mode batching")
		return 2
	}
	var bc sim.BatchConfig
	if batching {
		for _, name := range []string{"ttft", "itl", "ttft-per-prompt-token"} {
			if set[name] {
				fmt.Fprintf(stderr, "goodput sim: --%s is for --mode linear; the batching engine's timing comes from its step model\n", name)
				return 2
			}
		}
		name := *preset
		if name == "" {
			name = defaultPreset
		}
		var err error
		if bc, err = sim.Preset(name); err != nil {
			fmt.Fprintln(stderr, "goodput sim:", err)
			return 2
		}
		if set["max-num-seqs"] {
			bc.MaxNumSeqs = *maxSeqs
		}
		if set["kv-cache-tokens"] {
			bc.KVCacheTokens = *kvTokens
		}
		if set["max-num-batched-tokens"] {
			bc.MaxNumBatchedTokens = *batched
		}
		if set["step-base"] {
			bc.StepBase = stepBase.D()
		}
		if set["prefill-per-token"] {
			bc.PrefillPerToken = prefillTok.D()
		}
		if set["decode-per-seq"] {
			bc.DecodePerSeq = decodeSeq.D()
		}
		bc.Seed = *seed
		if err := bc.Validate(); err != nil {
			fmt.Fprintln(stderr, "goodput sim:", err)
			return 2
		}
	} else {
		for _, name := range []string{"max-num-seqs", "kv-cache-tokens", "max-num-batched-tokens", "step-base", "prefill-per-token", "decode-per-seq"} {
			if set[name] {
				fmt.Fprintf(stderr, "goodput sim: --%s needs --mode batching (or --preset)\n", name)
				return 2
			}
		}
	}
	if set["capacity"] {
		isl, osl, err := parseWorkload(*capacity)
		if err != nil {
			fmt.Fprintln(stderr, "goodput sim: --capacity:", err)
			return 2
		}
		fmt.Fprintf(stdout, "engine: max_num_seqs %d, max_num_batched_tokens %d, KV cache %d tokens, step = %v + %v·prefill tokens + %v·decoding requests\n",
			bc.MaxNumSeqs, bc.MaxNumBatchedTokens, bc.KVCacheTokens, bc.StepBase, bc.PrefillPerToken, bc.DecodePerSeq)
		fmt.Fprint(stdout, bc.Capacity(isl, osl))
		return 0
	}

	logger := log.New(stderr, "", log.LstdFlags|log.Lmicroseconds)
	cfg := sim.Config{Model: *model, TTFT: ttft.D(), ITL: itl.D(), TTFTPerPromptToken: perTok.D(), DefaultMaxTokens: *maxTokens, MaxModelLen: *modelLen, Seed: *seed}
	var engine *sim.Batching
	if batching {
		var err error
		if engine, err = sim.NewBatching(bc); err != nil {
			fmt.Fprintln(stderr, "goodput sim:", err)
			return 2
		}
		defer engine.Close()
		cfg.Scheduler = engine
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "goodput sim:", err)
		return 1
	}
	s := sim.New(cfg)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	logger.Printf("goodput sim: OpenAI-compatible simulator listening on http://%s", ln.Addr())
	if batching {
		logger.Printf("goodput sim: continuous-batching engine: max_num_seqs %d, max_num_batched_tokens %d, KV cache %d tokens, step = %v + %v·prefill tokens + %v·decoding requests",
			bc.MaxNumSeqs, bc.MaxNumBatchedTokens, bc.KVCacheTokens, bc.StepBase, bc.PrefillPerToken, bc.DecodePerSeq)
	}
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

// parseWorkload parses "ISL,OSL": prompt and output lengths in tokens.
func parseWorkload(s string) (isl, osl int, err error) {
	a, b, ok := strings.Cut(s, ",")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want ISL,OSL (prompt and output tokens, e.g. 1000,200)", s)
	}
	isl, err1 := strconv.Atoi(strings.TrimSpace(a))
	osl, err2 := strconv.Atoi(strings.TrimSpace(b))
	if err1 != nil || err2 != nil || isl < 0 || osl < 1 || isl > 10_000_000 || osl > 10_000_000 {
		return 0, 0, fmt.Errorf("%q: want ISL,OSL with 0 ≤ ISL and 1 ≤ OSL (at most 10000000 each)", s)
	}
	return isl, osl, nil
}
