package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	"sigs.k8s.io/yaml"
)

// The chart is linted and rendered for the oldest Kubernetes it supports
// (its Chart.yaml kubeVersion: the preStop hook's sleep action came in
// 1.30) and the newest this Helm knows (that of the k8s.io/client-go it is
// built on, v0.37), where the deprecated APIs are gone.
const (
	oldestKube = "v1.30.0"
	newestKube = "v1.37.0"
)

// namespace and release are those of the renderings.
const (
	namespace = "inference"
	release   = "goodput"
)

// valueSet is one set of values the chart is checked with.
type valueSet struct {
	name string         // "default" or the file's name without -values.yaml
	vals map[string]any // overrides of values.yaml
}

// checkChart lints and renders the chart at dir with every value set and
// checks the renderings; with out set it writes their configuration files.
func checkChart(root, dir, out string) []string {
	sets := []valueSet{{name: "default", vals: map[string]any{}}}
	files, _ := filepath.Glob(filepath.Join(dir, "ci", "*-values.yaml"))
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return []string{err.Error()}
		}
		var v map[string]any
		if err := yaml.UnmarshalStrict(b, &v); err != nil {
			return []string{fmt.Sprintf("%s: %v", f, err)}
		}
		sets = append(sets, valueSet{name: strings.TrimSuffix(filepath.Base(f), "-values.yaml"), vals: v})
	}
	if len(sets) < 2 {
		return []string{fmt.Sprintf("%s: no ci/*-values.yaml: the chart's optional objects would go unchecked", dir)}
	}

	oldest, err := common.ParseKubeVersion(oldestKube)
	if err != nil {
		return []string{err.Error()}
	}
	newest, err := common.ParseKubeVersion(newestKube)
	if err != nil {
		return []string{err.Error()}
	}
	rules, err := os.ReadFile(filepath.Join(root, "deploy", "prometheus", "goodput-rules.yaml"))
	if err != nil {
		return []string{err.Error()}
	}

	var findings []string
	kinds := map[string]bool{}
	for _, set := range sets {
		where := fmt.Sprintf("%s (values %s)", dir, set.name)
		for _, kv := range []*common.KubeVersion{oldest, newest} {
			linter := lint.RunAll(dir, set.vals, namespace, lint.WithKubeVersion(kv))
			for _, m := range linter.Messages {
				if m.Severity >= support.WarningSev {
					findings = append(findings, fmt.Sprintf("%s: helm lint, Kubernetes %s: %v", where, kv.Version, m))
				}
			}
		}
		for _, kv := range []*common.KubeVersion{oldest, newest} {
			manifests, err := render(dir, set.vals, kv)
			if err != nil {
				findings = append(findings, fmt.Sprintf("%s: render, Kubernetes %s: %v", where, kv.Version, err))
				continue
			}
			objs, fs := decodeManifests(manifests)
			for _, f := range fs {
				findings = append(findings, fmt.Sprintf("%s: %s", where, f))
			}
			for _, o := range objs {
				kinds[o.kind] = true
			}
			for _, f := range checkObjects(objs, rules) {
				findings = append(findings, fmt.Sprintf("%s: %s", where, f))
			}
			if out != "" && kv == oldest {
				if err := writeRendering(filepath.Join(out, "helm-"+set.name), manifests, objs); err != nil {
					findings = append(findings, fmt.Sprintf("%s: %v", where, err))
				}
			}
		}
	}
	// Every kind the chart promises is rendered by some value set.
	for _, k := range []string{"Deployment", "Service", "ConfigMap", "Secret", "ServiceAccount", "HorizontalPodAutoscaler", "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule"} {
		if !kinds[k] {
			findings = append(findings, fmt.Sprintf("%s: no value set renders a %s", dir, k))
		}
	}
	return findings
}

// render renders the chart as `helm template` would for an install, with
// the values checked against values.schema.json.
func render(dir string, overrides map[string]any, kv *common.KubeVersion) (map[string]string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, err
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	if c := ch.Metadata.KubeVersion; c != "" && !chartutil.IsCompatibleRange(c, kv.Version) {
		return nil, fmt.Errorf("Chart.yaml kubeVersion %q excludes %s", c, kv.Version)
	}
	vals, err := util.ToRenderValuesWithSchemaValidation(ch, overrides, common.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true}, caps, false)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, vals)
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeManifests splits every rendered template into its documents and
// decodes each one strictly into its API type.
func decodeManifests(manifests map[string]string) ([]object, []string) {
	var objs []object
	var findings []string
	for _, name := range slices.Sorted(mapKeys(manifests)) {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		for i, doc := range docSep.Split(manifests[name], -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			o, err := decodeObject([]byte(doc))
			if err != nil {
				findings = append(findings, fmt.Sprintf("%s, document %d: %v", name, i+1, err))
				continue
			}
			o.source = name
			objs = append(objs, o)
		}
	}
	return objs, findings
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// writeRendering writes the manifests to dir/manifests.yaml, the rendered
// goodput.yaml to dir/config/ and the tenants file to dir/tenants/, as the
// pod mounts them (the configuration names its tenants file by a path
// relative to its own folder).
func writeRendering(dir string, manifests map[string]string, objs []object) error {
	cm := find[*configMap](objs)
	if cm == nil {
		return fmt.Errorf("no ConfigMap to write")
	}
	if err := os.MkdirAll(filepath.Join(dir, "config"), 0o755); err != nil {
		return err
	}
	var all strings.Builder
	for _, name := range slices.Sorted(mapKeys(manifests)) {
		fmt.Fprintf(&all, "# Source: %s\n%s\n", name, manifests[name])
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests.yaml"), []byte(all.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config", "goodput.yaml"), []byte(cm.Data["goodput.yaml"]), 0o644); err != nil {
		return err
	}
	if s := find[*secret](objs); s != nil {
		if err := os.MkdirAll(filepath.Join(dir, "tenants"), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "tenants", "tenants.yaml"), s.Data["tenants.yaml"], 0o644)
	}
	return nil
}
