package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The checks fail when the deployment files break: each case breaks a copy
// of the repository's files in one way and expects a finding that says so;
// the unbroken copy has none.

const repo = "../.."

func TestMain(m *testing.M) {
	quietHelm()
	os.Exit(m.Run())
}

// copyRepo copies what the checks read (the Dockerfile, deploy/, an empty
// dashboards/) into a temporary folder, keeping symbolic links as links.
func copyRepo(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	for _, p := range []string{"Dockerfile", "deploy"} {
		err := filepath.WalkDir(filepath.Join(repo, p), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(repo, path)
			to := filepath.Join(dst, rel)
			switch {
			case d.Type()&fs.ModeSymlink != 0:
				link, err := os.Readlink(path)
				if err != nil {
					return err
				}
				return os.Symlink(link, to)
			case d.IsDir():
				return os.MkdirAll(to, 0o755)
			default:
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				return os.WriteFile(to, b, 0o644)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dst, "dashboards"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// replace replaces old by new in root/file, which must hold old exactly once.
func replace(t *testing.T, root, file, old, new string) {
	t.Helper()
	path := filepath.Join(root, file)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), old); n != 1 {
		t.Fatalf("%s holds %q %d times, want once: the case no longer breaks what it says", file, old, n)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func chartFindings(root string) []string {
	return checkChart(root, filepath.Join(root, "deploy", "helm", "goodput"), "")
}

func composeFindings(root string) []string {
	return checkCompose(root, filepath.Join(root, "deploy", "compose", "compose.yaml"))
}

func TestUnbrokenCopyHasNoFindings(t *testing.T) {
	root := copyRepo(t)
	if f := chartFindings(root); len(f) > 0 {
		t.Errorf("chart: %q", f)
	}
	if f := composeFindings(root); len(f) > 0 {
		t.Errorf("compose: %q", f)
	}
}

const (
	tpl = "deploy/helm/goodput/templates/"
	cf  = "deploy/compose/compose.yaml"
)

func TestChartBreakages(t *testing.T) {
	cases := []struct {
		name, file, old, new string
		want                 string // in some finding
	}{
		{"field name in the wrong case", tpl + "deployment.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true",
			`unknown field "spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem"`},
		{"no preStop", tpl + "deployment.yaml", "preStop:", "postStart:", "no preStop sleep"},
		{"readiness on /healthz", tpl + "deployment.yaml", `httpGet: {path: {{ if .Values.probes.readinessFollowsUpstream }}/readyz{{ else }}"/readyz?upstream=false"{{ end }}, port: admin}`, "httpGet: {path: /healthz, port: admin}", "readiness probe: GET /healthz"},
		{"grace period without the preStop", tpl + "deployment.yaml", "{{ add .Values.preStopSleepSeconds .Values.shutdownGraceSeconds 10 }}", "{{ .Values.shutdownGraceSeconds }}", "terminationGracePeriodSeconds 25: below"},
		{"root", tpl + "deployment.yaml", "        runAsNonRoot: true\n        runAsUser: 65532\n", "        runAsUser: 0\n", "pod: runAsNonRoot"},
		{"replicas under the autoscaler", tpl + "deployment.yaml", "{{- if not .Values.autoscaling.enabled }}", "{{- if true }}", "sets replicas while the HorizontalPodAutoscaler"},
		{"Service port the container lacks", tpl + "service.yaml", "targetPort: http", "targetPort: web", "targetPort web is not a container port"},
		{"admin Service drops terminating pods", tpl + "service.yaml", "  publishNotReadyAddresses: true\n", "", "lacks publishNotReadyAddresses"},
		{"ServiceMonitor on both Services", tpl + "servicemonitor.yaml", "      app.kubernetes.io/component: admin\n", "", "selects 2 Services"},
		{"tenants file outside the Secret", tpl + "_helpers.tpl", `"../tenants/tenants.yaml"`, `"tenants.yaml"`, `tenants_file "tenants.yaml"`},
		{"name the API server refuses", tpl + "service.yaml", `name: {{ include "goodput.fullname" . }}-admin`, `name: {{ include "goodput.fullname" . }}-Admin`, "helm lint"},
		{"tenants in the ConfigMap", "deploy/helm/goodput/ci/full-values.yaml", "config:\n", "config:\n  tenants_file: tenants.yaml\n", "put tenants in the chart's tenants:"},
		{"values against the schema", "deploy/helm/goodput/ci/full-values.yaml", "replicaCount: 3", `replicaCount: "3"`, "replicaCount"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := copyRepo(t)
			replace(t, root, c.file, c.old, c.new)
			expectFinding(t, chartFindings(root), c.want)
		})
	}
}

// The chart's PrometheusRule is the rules file itself (files/ links to
// it); a copy that drifts from it is found.
func TestChartRulesDrift(t *testing.T) {
	root := copyRepo(t)
	link := filepath.Join(root, "deploy/helm/goodput/files/goodput-rules.yaml")
	b, err := os.ReadFile(link)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(link, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if f := chartFindings(root); len(f) > 0 {
		t.Fatalf("an equal copy: %q", f)
	}
	replace(t, root, "deploy/helm/goodput/files/goodput-rules.yaml", "tenant_slo:goodput_slo_burn_rate:rate1h > 14.4", "tenant_slo:goodput_slo_burn_rate:rate1h > 14")
	expectFinding(t, chartFindings(root), "its groups differ from deploy/prometheus/goodput-rules.yaml")
}

func TestComposeBreakages(t *testing.T) {
	cases := []struct {
		name, old, new string
		want           string
	}{
		{"unknown key", "    image: redis:7.4-alpine\n", "    image: redis:7.4-alpine\n    restart_policy: always\n", "restart_policy"},
		{"port on every interface", `"127.0.0.1:3000:3000"`, `"3000:3000"`, "publishes 3000 on every interface"},
		{"image not pinned", "image: redis:7.4-alpine", "image: redis", `image "redis" is not pinned`},
		{"missing file", "./load.sh:/scripts/load.sh:ro", "./loadgen.sh:/scripts/load.sh:ro", "mounts deploy/compose/loadgen.sh, which does not exist"},
		{"writable mount", "./goodput.yaml:/etc/goodput/goodput.yaml:ro", "./goodput.yaml:/etc/goodput/goodput.yaml", "mounts deploy/compose/goodput.yaml writable"},
		{"undefined dependency", "      prometheus: {condition: service_started}\n", "      prom: {condition: service_started}\n", "prom"},
		{"configuration not mounted", "command: [serve, --config, /etc/goodput/goodput.yaml]", "command: [serve, --config, /etc/goodput/other.yaml]", `--config "/etc/goodput/other.yaml" is not a file mounted`},
		{"gateway writable", "  read_only: true\n  cap_drop: [ALL]\n", "  cap_drop: [ALL]\n", "without read_only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := copyRepo(t)
			replace(t, root, cf, c.old, c.new)
			expectFinding(t, composeFindings(root), c.want)
		})
	}
}

func expectFinding(t *testing.T, findings []string, want string) {
	t.Helper()
	for _, f := range findings {
		if strings.Contains(f, want) {
			t.Log(f)
			return
		}
	}
	t.Errorf("no finding says %q; findings: %q", want, findings)
}
