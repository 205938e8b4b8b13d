// Command goodput is a metering reverse proxy for LLM inference engines.
//
//	goodput serve    run the gateway (with no upstream: in front of the built-in simulator)
//	goodput sim      run the OpenAI-compatible engine simulator
//	goodput bench    load-test a server and measure it as the gateway does
//	goodput demo     the whole picture: simulator, gateway, three tenants, load across the knee
//	goodput keys     make gateway keys
//	goodput report   write a tenant's SLO report from a gateway's admin API or Prometheus
//	goodput compare  compare a benchmark result with real traffic (request log, profile or Prometheus)
//	goodput config   check a configuration file without starting anything
//	goodput health   ask a running gateway's admin listener whether it is up
//	goodput version  print the version
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand: its name, a line for the usage text, and what
// runs it with the arguments after its name.
type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) int
}

// commands lists every subcommand; the usage text is made from it, so that
// none is missing from --help.
var commands []command

func init() {
	commands = []command{
		{"serve", "run the metering gateway (no --upstream: in front of the built-in simulator)", cmdServe},
		{"sim", "run the OpenAI-compatible engine simulator", cmdSim},
		{"bench", "load-test an OpenAI-compatible server, measured as the gateway measures (vllm bench serve's figures)", cmdBench},
		{"demo", "the whole picture on one machine: batching simulator, gateway with three tenants, load across the knee, live table, HTML report", cmdDemo},
		{"keys", "make a gateway key: goodput keys new --tenant NAME --id KEY_ID", cmdKeys},
		{"report", "write a tenant's SLO report (Markdown, HTML or JSON) from a gateway or Prometheus", cmdReport},
		{"compare", "compare a benchmark result with real traffic: goodput compare --bench RESULT.json --real SOURCE", cmdCompare},
		{"config", "check a configuration file without starting anything: goodput config check FILE", cmdConfig},
		{"health", "exit 0 when a running gateway's admin listener answers /healthz (container health checks)", cmdHealth},
		{"version", "print the version, the commit it was built from and the Go version", cmdVersion},
	}
}

func usage() string {
	var b strings.Builder
	b.WriteString("usage: goodput <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun \"goodput <command> -h\" for a command's flags; \"goodput --version\" prints the version.\n")
	return b.String()
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage())
		return 0
	case "-version", "--version", "-v":
		return cmdVersion(nil, stdout, stderr)
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "goodput: unknown command %q\n\n%s", args[0], usage())
	return 2
}

// version, when set at link time (-ldflags "-X main.version=v1.2.3"), is
// the version printed; otherwise it is the module version the Go toolchain
// stamped into the binary (a tag, or a pseudo-version from the commit).
var version string

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: goodput version")
		return 2
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(bi, version))
	return 0
}

// versionLine is "goodput VERSION (revision REV[, modified], TIME; GO OS/ARCH)"
// from the build information the toolchain embeds; bi may be nil.
func versionLine(bi *debug.BuildInfo, linked string) string {
	v, goVersion := linked, runtime.Version()
	var rev, at string
	modified := false
	if bi != nil {
		if v == "" {
			v = bi.Main.Version
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	var details []string
	if rev != "" {
		r := "revision " + rev
		if modified {
			r += ", modified"
		}
		details = append(details, r)
	} else {
		details = append(details, "revision unknown")
	}
	if at != "" {
		details = append(details, at)
	}
	return fmt.Sprintf("goodput %s (%s; %s %s/%s)", v, strings.Join(details, ", "), goVersion, runtime.GOOS, runtime.GOARCH)
}
