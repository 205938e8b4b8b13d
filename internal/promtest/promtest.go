// Package promtest runs a private Prometheus server for tests: the
// distribution's `prometheus` binary on a loopback port of its own, scraping
// the targets a test names and evaluating the rule files it names, with its
// data in the test's temporary folder.
package promtest

import (
	"fmt"
	"github.com/goodput/goodput/internal/testenv"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
)

// Binary returns the path of the prometheus server. Without one it skips
// the test, except in CI (CI set), where it fails: CI must run these tests
// against a real Prometheus.
func Binary(t testing.TB) string {
	t.Helper()
	return testenv.Binary(t, "prometheus", "prometheus")
}

// Config is what the server scrapes and evaluates.
type Config struct {
	// Jobs maps a job name to the host:port targets it scrapes (/metrics).
	Jobs map[string][]string
	// RuleFiles are rule files to load (paths as the test sees them).
	RuleFiles []string
	// Interval is both the scrape and the rule evaluation interval.
	// Zero: 1s.
	Interval time.Duration
}

// Server is a running Prometheus.
type Server struct {
	URL string // http://127.0.0.1:port
	API v1.API
}

// Start starts Prometheus with cfg and waits until it is ready (at most
// 30 s). It is stopped when the test ends.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	every := cfg.Interval
	if every <= 0 {
		every = time.Second
	}
	var y strings.Builder
	fmt.Fprintf(&y, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n", every, every, every)
	if len(cfg.RuleFiles) > 0 {
		y.WriteString("rule_files:\n")
		for _, f := range cfg.RuleFiles {
			abs, err := filepath.Abs(f)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&y, "  - %s\n", strconv.Quote(abs))
		}
	}
	y.WriteString("scrape_configs:\n")
	for job, targets := range cfg.Jobs {
		fmt.Fprintf(&y, "  - job_name: %s\n    static_configs:\n      - targets: [", strconv.Quote(job))
		for i, tg := range targets {
			if i > 0 {
				y.WriteString(", ")
			}
			y.WriteString(strconv.Quote(tg))
		}
		y.WriteString("]\n")
	}
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(y.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command(bin,
		"--config.file="+conf,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	out, exited := testenv.StartChild(t, "prometheus", cmd)

	s := &Server{URL: "http://" + addr}
	hc := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("prometheus exited: %s\nconfig:\n%s", out.String(), y.String())
		default:
		}
		if resp, err := hc.Get(s.URL + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus on %s not ready after 30s: %s", addr, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	c, err := api.NewClient(api.Config{Address: s.URL, Client: hc})
	if err != nil {
		t.Fatal(err)
	}
	s.API = v1.NewAPI(c)
	return s
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
