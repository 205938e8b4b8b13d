// Command goodput is a metering reverse proxy for LLM inference engines.
//
//	goodput serve   run the gateway (with no upstream: in front of the built-in simulator)
//	goodput sim     run the OpenAI-compatible engine simulator
//	goodput keys    make gateway keys
//	goodput report  write a tenant's SLO report from a gateway's admin API or Prometheus
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: goodput <command> [flags]

commands:
  serve   run the metering gateway (no --upstream: in front of the built-in simulator)
  sim     run the OpenAI-compatible engine simulator
  report  write a tenant's SLO report (Markdown, HTML or JSON) from a gateway or Prometheus

Run "goodput <command> -h" for a command's flags.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return cmdServe(args[1:], stdout, stderr)
	case "sim":
		return cmdSim(args[1:], stdout, stderr)
	case "keys":
		return cmdKeys(args[1:], stdout, stderr)
	case "report":
		return cmdReport(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "goodput: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
