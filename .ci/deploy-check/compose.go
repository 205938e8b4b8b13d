package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// checkCompose loads the compose file as `docker compose config` does
// (schema, interpolation, merge keys, consistency: every depends_on,
// volume and network named exists) and then checks what the file promises.
func checkCompose(root, path string) []string {
	opts, err := cli.NewProjectOptions([]string{path},
		cli.WithWorkingDirectory(filepath.Dir(path)),
		cli.WithEnv(nil), // the machine's environment changes nothing
		cli.WithInterpolation(true),
		cli.WithNormalization(true),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", path, err)}
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", path, err)}
	}
	var f []string
	add := func(format string, args ...any) {
		f = append(f, fmt.Sprintf("%s: ", path)+fmt.Sprintf(format, args...))
	}

	absRoot, err := filepath.Abs(root)
	if err != nil {
		return []string{err.Error()}
	}
	built := ""
	for _, name := range slices.Sorted(mapKeys(p.Services)) {
		s := p.Services[name]
		if s.Build != nil {
			// Built from the repository's Dockerfile, as the README says.
			if s.Build.Context != absRoot || s.Build.Dockerfile != "Dockerfile" {
				add("service %s: builds %s in %s, want the repository's Dockerfile", name, s.Build.Dockerfile, s.Build.Context)
			}
			if built != "" && s.Image != built {
				add("service %s: builds image %q, another service builds %q", name, s.Image, built)
			}
			built = s.Image
		} else {
			// Anything pulled is pinned to a version.
			ref := s.Image
			if i := strings.LastIndex(ref, "/"); i >= 0 {
				ref = ref[i+1:]
			}
			tag := ""
			if i := strings.Index(ref, ":"); i >= 0 {
				tag = ref[i+1:]
			}
			if tag == "" || tag == "latest" {
				add("service %s: image %q is not pinned to a version", name, s.Image)
			}
		}
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind {
				if _, err := os.Stat(v.Source); err != nil {
					add("service %s: mounts %s, which does not exist", name, rel(absRoot, v.Source))
				}
				if !v.ReadOnly {
					add("service %s: mounts %s writable", name, rel(absRoot, v.Source))
				}
			}
		}
		for _, port := range s.Ports {
			if port.Published != "" && port.HostIP != "127.0.0.1" && port.HostIP != "::1" {
				add("service %s: publishes %s on every interface, want 127.0.0.1", name, port.Published)
			}
		}
	}
	// The gateway's image: read-only, no capabilities, the configuration
	// it is given is a file of the repository.
	served := false
	for _, name := range slices.Sorted(mapKeys(p.Services)) {
		s := p.Services[name]
		if s.Image != built {
			continue
		}
		if !s.ReadOnly || !slices.Equal(s.CapDrop, []string{"ALL"}) {
			add("service %s: the gateway's image runs without read_only or cap_drop ALL", name)
		}
		if len(s.Command) > 0 && s.Command[0] == "serve" {
			served = true
			cfg := ""
			for i, a := range s.Command {
				if a == "--config" && i+1 < len(s.Command) {
					cfg = s.Command[i+1]
				}
			}
			mounted := false
			for _, v := range s.Volumes {
				if v.Type == types.VolumeTypeBind && v.Target == cfg {
					mounted = true
				}
			}
			if !mounted {
				add("service %s: --config %q is not a file mounted from the repository", name, cfg)
			}
		}
	}
	if built == "" || !served {
		add("no service builds the gateway's image and runs goodput serve")
	}
	return f
}

func rel(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil {
		return r
	}
	return p
}
