package ratelimit

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A tenant name that is not valid UTF-8 (YAML lets one through as
// !!binary; a Go caller need not validate) panicked the Prometheus client:
// its metrics are those of "other".
func TestMetricsInvalidUTF8TenantIsOther(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, BackendLocal)
	if err != nil {
		t.Fatal(err)
	}
	m.SetTenants(time.Now(), []TenantConfig{{Name: "t\xff"}, {Name: "acme"}})
	if m.tenant("t\xff") != m.other || m.tenant("acme") == m.other {
		t.Fatal("the invalid name has children of its own, or acme has none")
	}
	m.tenant("t\xff").allowed[limitNone].Inc()
	if got := testutil.ToFloat64(m.decisions.WithLabelValues(otherTenant, "none", "allowed")); got != 1 {
		t.Fatalf("other allowed %v", got)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}
