// Command dockerfile-lint checks the repository's Dockerfile without a
// Docker daemon (CI machines have none): it runs BuildKit's own Dockerfile
// checks, the ones `docker build --check` runs, then a few rules of this
// project for the image it ships. It exits 1 on any finding.
//
//	go run . ../../Dockerfile
//
// Base images are not fetched (there is no registry to ask): they are taken
// to have an empty configuration, so checks that need a base image's
// contents (its platforms, its ENV) do not run.
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerui"
	digest "github.com/opencontainers/go-digest"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: dockerfile-lint DOCKERFILE")
		os.Exit(2)
	}
	path := os.Args[1]
	dt, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	findings := buildkitChecks(path, dt)
	findings = append(findings, projectChecks(path, dt)...)
	for _, f := range findings {
		fmt.Println(f)
	}
	if len(findings) > 0 {
		fmt.Printf("%s: %d findings\n", path, len(findings))
		os.Exit(1)
	}
	fmt.Printf("%s: no findings\n", path)
}

// buildkitChecks runs BuildKit's lint (all stages, every rule that is not
// experimental) and returns its warnings and any error as findings.
func buildkitChecks(path string, dt []byte) []string {
	smap := llb.NewSourceMap(nil, path, "Dockerfile", dt)
	smap.Definition = &llb.Definition{}
	opt := dockerfile2llb.ConvertOpt{
		Config:       dockerui.Config{},
		SourceMap:    smap,
		MetaResolver: emptyImages{},
	}
	res, err := dockerfile2llb.DockerfileLint(context.Background(), dt, opt)
	if err != nil {
		return []string{fmt.Sprintf("%s: lint: %v", path, err)}
	}
	var out []string
	for _, w := range res.Warnings {
		line := 0
		if w.Location != nil && len(w.Location.Ranges) > 0 {
			line = int(w.Location.Ranges[0].Start.Line)
		}
		out = append(out, fmt.Sprintf("%s:%d: %s: %s (%s)", path, line, w.RuleName, w.Detail, w.URL))
	}
	if res.Error != nil {
		line := 0
		if len(res.Error.Location.Ranges) > 0 {
			line = int(res.Error.Location.Ranges[0].Start.Line)
		}
		out = append(out, fmt.Sprintf("%s:%d: error: %s", path, line, res.Error.Message))
	}
	return out
}

// emptyImages answers every base image with an empty configuration.
type emptyImages struct{}

func (emptyImages) ResolveImageConfig(_ context.Context, ref string, _ sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	return ref, digest.FromString(ref), []byte(`{"architecture":"amd64","os":"linux","config":{},"rootfs":{"type":"layers"}}`), nil
}

// projectChecks are this project's rules for the image it ships: the final
// stage runs as a user other than root, in a working directory, with a
// HEALTHCHECK; its default command keeps the admin listener (no
// authentication) off other machines; a .dockerignore beside the
// Dockerfile keeps .git out of the build context.
func projectChecks(path string, dt []byte) []string {
	// A Dockerfile that does not parse is already a finding of BuildKit's.
	ast, err := parser.Parse(bytes.NewReader(dt))
	if err != nil {
		return nil
	}
	stages, _, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		return nil
	}
	if len(stages) == 0 {
		return []string{path + ": no stages"}
	}
	final := stages[len(stages)-1]
	at := func(loc []parser.Range) int {
		if len(loc) == 0 {
			return 0
		}
		return loc[0].Start.Line
	}
	var out []string
	add := func(line int, format string, a ...any) {
		out = append(out, fmt.Sprintf("%s:%d: goodput: %s", path, line, fmt.Sprintf(format, a...)))
	}
	var user, workdir string
	var health *instructions.HealthCheckCommand
	var cmd *instructions.CmdCommand
	for _, c := range final.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.WorkdirCommand:
			workdir = c.Path
		case *instructions.HealthCheckCommand:
			health = c
		case *instructions.CmdCommand:
			cmd = c
		}
	}
	finalLine := at(final.Location)
	if name, _, _ := strings.Cut(user, ":"); name == "" || name == "root" || name == "0" {
		add(finalLine, "the final stage must run as a user other than root (USER)")
	}
	if workdir == "" {
		add(finalLine, "the final stage must set a WORKDIR its user can write (relative paths such as --request-log requests.jsonl land there)")
	}
	if health == nil || len(health.Health.Test) == 0 || health.Health.Test[0] == "NONE" {
		add(finalLine, "the final stage must have a HEALTHCHECK")
	} else if !slices.Contains(health.Health.Test, "health") {
		add(at(health.Location()), "the HEALTHCHECK should run `goodput health` (the image has no curl)")
	}
	if cmd != nil {
		// Shell form is one string: split it the same way.
		args := strings.Fields(strings.Join(cmd.CmdLine, " "))
		for i, a := range args {
			v, isFlag := "", false
			switch {
			case a == "--admin-listen" || a == "-admin-listen":
				isFlag = true
				if i+1 < len(args) {
					v = args[i+1]
				}
			case strings.HasPrefix(a, "--admin-listen=") || strings.HasPrefix(a, "-admin-listen="):
				isFlag = true
				_, v, _ = strings.Cut(a, "=")
			}
			if isFlag && (strings.HasPrefix(v, ":") || strings.HasPrefix(v, "0.0.0.0:") || strings.HasPrefix(v, "[::]:")) {
				add(at(cmd.Location()), "the default command exposes the admin listener (no authentication) on every interface (%s)", v)
			}
		}
	}
	ignore, err := os.ReadFile(filepath.Join(filepath.Dir(path), ".dockerignore"))
	if err != nil {
		add(0, "no .dockerignore beside the Dockerfile: %v", err)
	} else if !slices.ContainsFunc(strings.Split(string(ignore), "\n"), func(l string) bool {
		l = strings.TrimSpace(l)
		return l == ".git" || l == ".git/" || l == "/.git"
	}) {
		add(0, ".dockerignore must leave .git out of the build context")
	}
	return out
}
