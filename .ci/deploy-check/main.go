// Command deploy-check checks the repository's deployment files without a
// cluster or a Docker daemon (CI machines have neither):
//
//   - the Helm chart (deploy/helm/goodput): helm lint, with Helm's own
//     library, for the default values and every ci/*-values.yaml, at the
//     oldest Kubernetes the chart supports and at the newest this Helm
//     knows; then each rendering is decoded strictly into the Kubernetes
//     API types (and the Prometheus Operator's), so an unknown or misspelt
//     field, a wrong type or an unknown kind is an error; then the chart's
//     own promises are checked (probes on the admin port, the preStop and
//     the grace period, the non-root read-only container, selectors that
//     select the pods, the PrometheusRule equal to
//     deploy/prometheus/goodput-rules.yaml);
//   - the compose file (deploy/compose/compose.yaml): loaded, validated
//     against the Compose specification's schema and normalised by
//     compose-go, the library of `docker compose config`; then every
//     file it mounts exists, every image is pinned, every published port is
//     on the loopback.
//
// With -out DIR it writes each rendering to DIR/helm-NAME/manifests.yaml,
// and its goodput.yaml and tenants file beside it, laid out as in the pod,
// for `goodput config check`.
//
//	go run . [-out DIR] ../..
//
// It exits 1 on any finding.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

func main() {
	out := flag.String("out", "", "write the chart's rendered goodput configuration files under this folder")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: deploy-check [-out DIR] REPO_ROOT")
		flag.PrintDefaults()
	}
	flag.Parse()
	quietHelm()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	root := flag.Arg(0)

	var findings []string
	start := time.Now()
	findings = append(findings, checkChart(root, filepath.Join(root, "deploy", "helm", "goodput"), *out)...)
	fmt.Printf("helm chart: %d findings (%.1fs)\n", len(findings), time.Since(start).Seconds())

	start = time.Now()
	cf := checkCompose(root, filepath.Join(root, "deploy", "compose", "compose.yaml"))
	fmt.Printf("compose file: %d findings (%.1fs)\n", len(cf), time.Since(start).Seconds())
	findings = append(findings, cf...)

	seen := map[string]bool{}
	for _, f := range findings {
		if !seen[f] { // the same finding at both Kubernetes versions
			seen[f] = true
			fmt.Println(f)
		}
	}
	if len(findings) > 0 {
		fmt.Printf("deploy-check: %d findings\n", len(findings))
		os.Exit(1)
	}
	fmt.Println("deploy-check: no findings")
}

// quietHelm keeps Helm's information messages out of the output: it logs
// every symbolic link it follows (files/ links to the rules).
func quietHelm() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}
