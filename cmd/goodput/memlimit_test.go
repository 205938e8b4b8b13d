package main

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/config"
	"github.com/goodput/goodput/proxy"
)

// max_body_memory's default is a quarter of the memory the process may
// use: the least of its cgroups' limits (v2 or v1, its own cgroup, its
// ancestors' and the mount's root), the machine's memory and GOMEMLIMIT; never less than one
// body of max_body_bytes, and the proxy's default when nothing is known.
func TestMaxBodyMemoryDefault(t *testing.T) {
	const meminfo = "MemTotal:       24576000 kB\nMemFree:         1000 kB\n"
	machine := int64(24576000) << 10
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(name string) ([]byte, error) {
			if s, ok := m[name]; ok {
				return []byte(s), nil
			}
			return nil, fs.ErrNotExist
		}
	}
	for _, c := range []struct {
		name  string
		files map[string]string
		gomem int64
		want  int64
		what  string
	}{
		{"machine only", map[string]string{"/proc/meminfo": meminfo}, math.MaxInt64, machine, "the machine's memory"},
		{"v2 container, path hidden", map[string]string{"/proc/meminfo": meminfo, "/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "1073741824\n"}, math.MaxInt64, 1 << 30, "the cgroup's memory limit"},
		{"v2 unit", map[string]string{"/proc/meminfo": meminfo, "/proc/self/cgroup": "0::/system.slice/goodput.service\n", "/sys/fs/cgroup/system.slice/goodput.service/memory.max": "2147483648\n", "/sys/fs/cgroup/memory.max": "max\n"}, math.MaxInt64, 2 << 30, "the cgroup's memory limit"},
		// A systemd slice's MemoryMax over a unit that sets none, and a
		// pod's limit over a container's larger one: the parent's bounds.
		{"v2 slice above the unit", map[string]string{"/proc/meminfo": meminfo, "/proc/self/cgroup": "0::/gateways.slice/goodput.service\n", "/sys/fs/cgroup/gateways.slice/goodput.service/memory.max": "max\n", "/sys/fs/cgroup/gateways.slice/memory.max": "1073741824\n"}, math.MaxInt64, 1 << 30, "the cgroup's memory limit"},
		{"v2 pod above the container", map[string]string{"/proc/meminfo": meminfo, "/proc/self/cgroup": "0::/kubepods/pod1/c1\n", "/sys/fs/cgroup/kubepods/pod1/c1/memory.max": "4294967296\n", "/sys/fs/cgroup/kubepods/pod1/memory.max": "2147483648\n", "/sys/fs/cgroup/kubepods/memory.max": "8589934592\n"}, math.MaxInt64, 2 << 30, "the cgroup's memory limit"},
		{"v1 parent", map[string]string{"/proc/meminfo": meminfo, "/proc/self/cgroup": "4:memory:/docker/abc\n", "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "9223372036854771712\n", "/sys/fs/cgroup/memory/docker/memory.limit_in_bytes": "536870912\n"}, math.MaxInt64, 512 << 20, "the cgroup's memory limit"},
		{"v2 no limit", map[string]string{"/proc/meminfo": meminfo, "/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "max\n"}, math.MaxInt64, machine, "the machine's memory"},
		{"v1", map[string]string{"/proc/meminfo": meminfo, "/proc/self/cgroup": "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n", "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "536870912\n"}, math.MaxInt64, 512 << 20, "the cgroup's memory limit"},
		{"v1 unlimited", map[string]string{"/proc/meminfo": meminfo, "/proc/self/cgroup": "4:memory:/\n", "/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, math.MaxInt64, machine, "the machine's memory"},
		{"GOMEMLIMIT", map[string]string{"/proc/meminfo": meminfo}, 3 << 30, 3 << 30, "GOMEMLIMIT"},
		{"nothing known", nil, math.MaxInt64, 0, ""},
	} {
		got, what := memoryLimit(files(c.files), c.gomem)
		if got != c.want || what != c.what {
			t.Errorf("%s: %d (%s), want %d (%s)", c.name, got, what, c.want, c.what)
		}
	}
	for _, c := range []struct {
		cfg   config.Config
		limit int64
		want  int64
		note  string
	}{
		{config.Config{}, 8 << 30, 2 << 30, "a quarter of 8589934592 bytes"},
		{config.Config{}, 0, proxy.DefaultMaxBodyMemory, "not known"},
		{config.Config{}, 32 << 20, 16 << 20, "raised to max_body_bytes"},
		{config.Config{MaxBodyBytes: 1 << 30}, 2 << 30, 1 << 30, "raised to max_body_bytes"},
		{config.Config{MaxBodyMemory: 100 << 20}, 8 << 30, 100 << 20, "configured"},
	} {
		got, note := maxBodyMemory(&c.cfg, c.limit, "the machine's memory")
		if got != c.want || !strings.Contains(note, c.note) {
			t.Errorf("%+v with %d: %d (%s), want %d (%s)", c.cfg, c.limit, got, note, c.want, c.note)
		}
	}
	for _, c := range []struct {
		cfg   config.Config
		limit int64
		want  int64
		note  string
	}{
		{config.Config{}, 8 << 30, 2 << 30, "a quarter of 8589934592 bytes"},
		{config.Config{}, 0, proxy.DefaultMaxLagMemory, "not known"},
		{config.Config{MaxLagMemory: 100 << 20}, 8 << 30, 100 << 20, "configured"},
	} {
		got, note := maxLagMemory(&c.cfg, c.limit, "the machine's memory")
		if got != c.want || !strings.Contains(note, c.note) {
			t.Errorf("max_lag_memory of %+v with %d: %d (%s), want %d (%s)", c.cfg, c.limit, got, note, c.want, c.note)
		}
	}
	if _, err := config.Parse(strings.NewReader("max_lag_memory: -1\n")); err == nil || !strings.Contains(err.Error(), "max_lag_memory: must not be negative") {
		t.Errorf("max_lag_memory -1: %v", err)
	}
	if _, err := config.Parse(strings.NewReader("max_body_memory: 1048576\n")); err == nil || !strings.Contains(err.Error(), "max_body_memory: 1048576 is less than max_body_bytes (16777216)") {
		t.Errorf("max_body_memory below max_body_bytes: %v", err)
	}
	if c, err := config.Parse(strings.NewReader(fmt.Sprintf("max_body_bytes: 1048576\nmax_body_memory: %d\n", 64<<20))); err != nil || c.MaxBodyMemory != 64<<20 {
		t.Errorf("max_body_memory 64 MiB: %+v %v", c, err)
	}
}

// serve runs with max_body_memory and max_lag_memory, says so at start, and
// exports the bodies held, the requests refused for want of room and what
// clients that lag are held.
func TestMaxBodyMemoryServed(t *testing.T) {
	s, logs := startServe(t, &config.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", MaxBodyBytes: 64 << 10, MaxBodyMemory: 64 << 10, MaxLagMemory: 1 << 20})
	for _, want := range []string{"max_body_memory 65536 bytes (configured)", "max_lag_memory 1048576 bytes (configured)"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("no %q at start: %s", want, logs.String())
		}
	}
	head := func() *bufio.Reader {
		c, err := net.Dial("tcp", s.Proxy)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 65536\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		return bufio.NewReader(c)
	}
	head() // held, its body awaited
	metrics := "http://" + s.Admin + "/metrics"
	waitFor(t, func() bool { return strings.Contains(scrape(t, metrics), "goodput_request_body_bytes 65536") })
	if line, err := head().ReadString('\n'); err != nil || !strings.Contains(line, " 503 ") {
		t.Fatalf("a head past max_body_memory: %q %v, want 503", line, err)
	}
	waitFor(t, func() bool { return strings.Contains(scrape(t, metrics), "goodput_request_bodies_refused_total 1") })
	if !strings.Contains(scrape(t, metrics), "goodput_client_lag_bytes 0") {
		t.Fatal("no goodput_client_lag_bytes")
	}
}
