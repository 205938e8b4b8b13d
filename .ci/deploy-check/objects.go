package main

import (
	"errors"
	"fmt"
	pathpkg "path"
	"reflect"
	"slices"
	"strings"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// object is one rendered manifest, decoded.
type object struct {
	kind, name string
	source     string // the template it came from
	obj        any    // a pointer to its API type
}

type (
	configMap = corev1.ConfigMap
	secret    = corev1.Secret
)

// types are the kinds the chart may render, by apiVersion and kind; any
// other is a finding (add it here, with its API type, when the chart gains
// one).
var apiTypes = map[string]func() any{
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                               func() any { return &corev1.Secret{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"autoscaling/v2/HorizontalPodAutoscaler":  func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &monitoringv1.PrometheusRule{} },
}

// decodeObject decodes one manifest strictly: an unknown field, a field
// given twice or a value of the wrong type is an error, as are names and
// labels the API server would refuse.
func decodeObject(doc []byte) (object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return object{}, err
	}
	mk, ok := apiTypes[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return object{}, fmt.Errorf("apiVersion %q kind %q: not a kind this check knows", tm.APIVersion, tm.Kind)
	}
	// As the API server decodes: field names match case-sensitively (so
	// readOnlyRootFileSystem is unknown, not readOnlyRootFilesystem), and
	// an unknown or duplicate field is an error, not a warning.
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return object{}, fmt.Errorf("%s: %v", tm.Kind, err)
	}
	v := mk()
	strict, err := sigsjson.UnmarshalStrict(j, v)
	if err == nil {
		err = errors.Join(strict...)
	}
	if err != nil {
		return object{}, fmt.Errorf("%s: %v", tm.Kind, err)
	}
	meta := reflect.ValueOf(v).Elem().FieldByName("ObjectMeta").Addr().Interface().(*metav1.ObjectMeta)
	o := object{kind: tm.Kind, name: meta.Name, obj: v}
	var errs []string
	nameCheck := validation.IsDNS1123Subdomain
	if tm.Kind == "Service" {
		nameCheck = validation.IsDNS1035Label
	}
	errs = append(errs, nameCheck(meta.Name)...)
	if meta.Namespace != "" {
		errs = append(errs, "metadata.namespace is set: the release's namespace is helm's to choose")
	}
	errs = append(errs, labelErrors(meta.Labels)...)
	for k := range meta.Annotations {
		errs = append(errs, validation.IsQualifiedName(k)...)
	}
	if d, ok := v.(*appsv1.Deployment); ok {
		errs = append(errs, labelErrors(d.Spec.Template.Labels)...)
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("%s %q: %s", tm.Kind, meta.Name, strings.Join(errs, "; "))
	}
	return o, nil
}

func labelErrors(l map[string]string) []string {
	var errs []string
	for k, v := range l {
		errs = append(errs, validation.IsQualifiedName(k)...)
		errs = append(errs, validation.IsValidLabelValue(v)...)
	}
	return errs
}

// find returns the first object of type T, or the zero T.
func find[T any](objs []object) T {
	for _, o := range objs {
		if t, ok := o.obj.(T); ok {
			return t
		}
	}
	var zero T
	return zero
}

func findAll[T any](objs []object) []T {
	var all []T
	for _, o := range objs {
		if t, ok := o.obj.(T); ok {
			all = append(all, t)
		}
	}
	return all
}

// gatewayConfig is the part of the rendered goodput.yaml the checks read.
type gatewayConfig struct {
	Listen        string `json:"listen"`
	AdminListen   string `json:"admin_listen"`
	ShutdownGrace string `json:"shutdown_grace"`
	TenantsFile   string `json:"tenants_file"`
}

// checkObjects checks what the chart promises of the objects one
// rendering made; rules is deploy/prometheus/goodput-rules.yaml.
func checkObjects(objs []object, rules []byte) []string {
	var f []string
	add := func(format string, args ...any) { f = append(f, fmt.Sprintf(format, args...)) }

	deps := findAll[*appsv1.Deployment](objs)
	cm := find[*configMap](objs)
	if len(deps) != 1 || cm == nil {
		add("want one Deployment and its ConfigMap, got %d Deployments", len(deps))
		return f
	}
	d := deps[0]
	var cfg gatewayConfig
	if err := yaml.Unmarshal([]byte(cm.Data["goodput.yaml"]), &cfg); err != nil {
		add("ConfigMap %s: goodput.yaml: %v", cm.Name, err)
	}
	pod := d.Spec.Template
	podLabels := labels.Set(pod.Labels)
	if d.Spec.Selector == nil {
		add("Deployment %s: no selector", d.Name)
		return f
	}
	if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil || !sel.Matches(podLabels) {
		add("Deployment %s: its selector does not select its pods (%v)", d.Name, err)
	}
	if len(pod.Spec.Containers) != 1 {
		add("Deployment %s: want one container, got %d", d.Name, len(pod.Spec.Containers))
		return f
	}
	c := pod.Spec.Containers[0]

	// Ports: the ones goodput.yaml listens on.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, want := range []struct{ name, listen string }{{"http", cfg.Listen}, {"admin", cfg.AdminListen}} {
		if p, ok := ports[want.name]; !ok || fmt.Sprintf(":%d", p) != want.listen {
			add("container port %q (%d) is not where goodput.yaml listens (%q)", want.name, p, want.listen)
		}
	}

	// Probes: liveness /healthz, readiness /readyz, on the admin port.
	probe := func(what string, p *corev1.Probe, path string, or ...string) {
		switch {
		case p == nil || p.HTTPGet == nil:
			add("%s probe: want an HTTP GET of %s on the admin port", what, path)
		case p.HTTPGet.Path != path && !slices.Contains(or, p.HTTPGet.Path) || p.HTTPGet.Port.String() != "admin":
			add("%s probe: GET %s on port %s, want %s on admin", what, p.HTTPGet.Path, p.HTTPGet.Port.String(), path)
		}
	}
	probe("liveness", c.LivenessProbe, "/healthz")
	probe("readiness", c.ReadinessProbe, "/readyz", "/readyz?upstream=false")
	probe("startup", c.StartupProbe, "/healthz")

	// Shutdown: a preStop sleep, then shutdown_grace, then 5 s for the cut
	// requests' records, all within the pod's grace period.
	var sleep int64
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 1 {
		add("no preStop sleep: the listener would close while endpoints still send to the pod")
	} else {
		sleep = c.Lifecycle.PreStop.Sleep.Seconds
	}
	grace, err := time.ParseDuration(cfg.ShutdownGrace)
	if err != nil {
		add("goodput.yaml shutdown_grace %q: %v", cfg.ShutdownGrace, err)
	}
	need := sleep + int64(grace/time.Second) + 5
	if tg := pod.Spec.TerminationGracePeriodSeconds; tg == nil || *tg < need {
		add("terminationGracePeriodSeconds %v: below preStop %ds + shutdown_grace %v + 5s", deref(tg), sleep, grace)
	}

	// Security: non-root, read-only root file system, nothing to escalate.
	sc, psc := c.SecurityContext, pod.Spec.SecurityContext
	switch {
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		add("container: readOnlyRootFilesystem is not true")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		add("container: allowPrivilegeEscalation is not false")
	case sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL":
		add("container: capabilities do not drop ALL")
	}
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		add("pod: runAsNonRoot and a non-zero runAsUser are not set")
	}
	if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
		add("container: no CPU request (the HorizontalPodAutoscaler's utilisation is relative to it)")
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		add("container: no memory limit")
	}

	// Volumes: every mount has its volume; the configuration file the
	// container is given is in the ConfigMap's mount; the tenants file in
	// the Secret's.
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]string{} // volume name -> mount path
	for _, m := range c.VolumeMounts {
		if _, ok := vols[m.Name]; !ok {
			add("volume mount %q: no such volume", m.Name)
		}
		if m.SubPath != "" {
			add("volume mount %q: subPath keeps a changed ConfigMap or Secret from reaching the file", m.Name)
		}
		mounts[m.Name] = m.MountPath
	}
	cfgPath := ""
	for i, a := range c.Args {
		if a == "--config" && i+1 < len(c.Args) {
			cfgPath = c.Args[i+1]
		}
	}
	cfgVol := ""
	for name, v := range vols {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			cfgVol = name
		}
	}
	if cfgPath == "" || cfgVol == "" || cfgPath != mounts[cfgVol]+"/goodput.yaml" {
		add("--config %q is not goodput.yaml in the ConfigMap's mount (%q)", cfgPath, mounts[cfgVol])
	}
	if cfg.TenantsFile != "" {
		path := cfg.TenantsFile
		if !strings.HasPrefix(path, "/") {
			path = pathpkg.Join(mounts[cfgVol], path)
		}
		found := false
		for name, v := range vols {
			if v.Secret != nil && path == mounts[name]+"/tenants.yaml" {
				found = true
			}
		}
		if !found {
			add("tenants_file %q (%s) is not tenants.yaml in a Secret's mount", cfg.TenantsFile, path)
		}
	}

	// Services select the pods and name ports the container has.
	svcs := findAll[*corev1.Service](objs)
	if len(svcs) == 0 {
		add("no Service")
	}
	for _, s := range svcs {
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) || len(s.Spec.Selector) == 0 {
			add("Service %s: its selector does not select the pods", s.Name)
		}
		for _, p := range s.Spec.Ports {
			if _, ok := ports[p.TargetPort.String()]; !ok {
				add("Service %s: targetPort %s is not a container port", s.Name, p.TargetPort.String())
			}
		}
	}

	if h := find[*autoscalingv2.HorizontalPodAutoscaler](objs); h != nil {
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != d.Name {
			add("HorizontalPodAutoscaler %s: scales %s %s, not the Deployment %s", h.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name, d.Name)
		}
		if d.Spec.Replicas != nil {
			add("Deployment %s: sets replicas while the HorizontalPodAutoscaler scales it (each upgrade would reset them)", d.Name)
		}
	}
	if p := find[*policyv1.PodDisruptionBudget](objs); p != nil {
		if sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector); err != nil || sel.Empty() || !sel.Matches(podLabels) {
			add("PodDisruptionBudget %s: its selector does not select the pods", p.Name)
		}
	}
	if sm := find[*monitoringv1.ServiceMonitor](objs); sm != nil {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		scraped := 0
		for _, s := range svcs {
			if err == nil && sel.Matches(labels.Set(s.Labels)) {
				scraped++
				if !s.Spec.PublishNotReadyAddresses {
					// Endpoints drop a pod as its deletion starts: the
					// scrape the gateway waits for at shutdown never comes.
					add("ServiceMonitor %s: Service %s lacks publishNotReadyAddresses: true, so a terminating pod leaves the scraped endpoints before its last scrape", sm.Name, s.Name)
				}
				for _, e := range sm.Spec.Endpoints {
					if !hasPort(s, e.Port) || ports[e.Port] == 0 || fmt.Sprintf(":%d", ports[e.Port]) != cfg.AdminListen {
						add("ServiceMonitor %s: endpoint port %q is not the admin port of Service %s", sm.Name, e.Port, s.Name)
					}
				}
			}
		}
		if scraped != 1 {
			add("ServiceMonitor %s: selects %d Services, want the admin one", sm.Name, scraped)
		}
	}
	if pr := find[*monitoringv1.PrometheusRule](objs); pr != nil {
		f = append(f, compareRules(pr, rules)...)
	}
	return f
}

func hasPort(s *corev1.Service, name string) bool {
	for _, p := range s.Spec.Ports {
		if p.Name == name {
			return true
		}
	}
	return false
}

// compareRules checks that the PrometheusRule's groups are those of
// deploy/prometheus/goodput-rules.yaml, read here from the repository
// (not through the chart's link to it), compared as data.
func compareRules(pr *monitoringv1.PrometheusRule, rules []byte) []string {
	var want struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(rules, &want); err != nil {
		return []string{fmt.Sprintf("deploy/prometheus/goodput-rules.yaml: %v", err)}
	}
	b, err := yaml.Marshal(pr.Spec)
	if err != nil {
		return []string{err.Error()}
	}
	var got struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &got); err != nil {
		return []string{err.Error()}
	}
	if len(want.Groups) == 0 {
		return []string{"deploy/prometheus/goodput-rules.yaml: no groups"}
	}
	if !reflect.DeepEqual(normalise(want.Groups), normalise(got.Groups)) {
		wb, _ := yaml.Marshal(want.Groups)
		gb, _ := yaml.Marshal(got.Groups)
		return []string{fmt.Sprintf("PrometheusRule %s: its groups differ from deploy/prometheus/goodput-rules.yaml:\n%s", pr.Name, firstDiff(string(wb), string(gb)))}
	}
	return nil
}

// normalise makes both sides comparable: the operator's types hold the
// durations and expressions as strings, YAML may have numbers.
func normalise(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := map[string]any{}
		for k, x := range t {
			m[k] = normalise(x)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, x := range t {
			s[i] = normalise(x)
		}
		return s
	default:
		return fmt.Sprint(t)
	}
}

func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return fmt.Sprintf("  line %d: the rules file has %q, the chart renders %q", i+1, a, b)
		}
	}
	return "  (they differ only in types)"
}

func deref[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}
