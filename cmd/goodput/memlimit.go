package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/goodput/goodput/internal/config"
	"github.com/goodput/goodput/proxy"
)

// memoryLimit returns the memory the process may use, in bytes, and what
// sets it: the least of its cgroups' memory limits (v2 memory.max, v1
// memory.limit_in_bytes: a container's, a systemd unit's MemoryMax, or
// those of the slices and pods above them, which bound every process
// below them together), the machine's memory (MemTotal) and GOMEMLIMIT; 0
// when none is known (not Linux). readFile reads a file (os.ReadFile;
// tests give their own).
func memoryLimit(readFile func(string) ([]byte, error), goMemLimit int64) (int64, string) {
	var limit int64
	var what string
	take := func(n int64, w string) {
		if n > 0 && (limit == 0 || n < limit) {
			limit, what = n, w
		}
	}
	if b, err := readFile("/proc/meminfo"); err == nil {
		take(memTotal(string(b)), "the machine's memory")
	}
	if b, err := readFile("/proc/self/cgroup"); err == nil {
		for _, f := range cgroupLimitFiles(string(b)) {
			if c, err := readFile(f); err == nil {
				if n, ok := cgroupLimit(string(c)); ok {
					take(n, "the cgroup's memory limit")
				}
			}
		}
	}
	if goMemLimit > 0 && goMemLimit != math.MaxInt64 {
		take(goMemLimit, "GOMEMLIMIT")
	}
	return limit, what
}

// memTotal reads MemTotal from /proc/meminfo, in bytes; 0 when absent.
func memTotal(meminfo string) int64 {
	sc := bufio.NewScanner(strings.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || kb <= 0 {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// cgroupLimitFiles lists the files that may hold a memory limit over the
// process, from /proc/self/cgroup: its own cgroup's (v2 "0::/path", v1
// "N:...memory...:/path"), each ancestor's up to the hierarchy's root (a
// systemd slice's MemoryMax, a Kubernetes pod's limit over its
// containers': a parent's limit bounds its children together, whatever
// theirs say), and the mount's root, which is a container's own cgroup
// when its namespace hides the path. The least of them is the limit.
func cgroupLimitFiles(procCgroup string) []string {
	var files []string
	sc := bufio.NewScanner(strings.NewReader(procCgroup))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		p := path.Clean("/" + parts[2])
		switch {
		case parts[0] == "0" && parts[1] == "":
			files = appendAncestry(files, "/sys/fs/cgroup", p, "memory.max")
		case hasController(parts[1], "memory"):
			files = appendAncestry(files, "/sys/fs/cgroup/memory", p, "memory.limit_in_bytes")
		}
	}
	return files
}

// appendAncestry appends the file name of the cgroup at p (a clean
// absolute path) under mount and of each of its ancestors, the mount's
// root last.
func appendAncestry(files []string, mount, p, name string) []string {
	for {
		files = append(files, path.Join(mount, p, name))
		if p == "/" {
			return files
		}
		p = path.Dir(p)
	}
}

func hasController(list, c string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == c {
			return true
		}
	}
	return false
}

// cgroupLimit reads a cgroup memory limit file: false for "max" and for
// v1's "no limit" (a number near 2^63).
func cgroupLimit(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= 1<<60 {
		return 0, false
	}
	return n, true
}

// maxBodyMemory returns max_body_memory, or its default: a quarter of the
// memory the process may use (DefaultMaxBodyMemory when that is not
// known), never less than one body of max_body_bytes; and a note for the
// log saying where it comes from.
func maxBodyMemory(cfg *config.Config, limit int64, what string) (int64, string) {
	maxBody := int64(cfg.MaxBodyBytes)
	if maxBody == 0 {
		maxBody = config.DefaultMaxBodyBytes
	}
	if cfg.MaxBodyMemory > 0 {
		return cfg.MaxBodyMemory, "configured"
	}
	n, note := int64(proxy.DefaultMaxBodyMemory), "the default: the memory the process may use is not known"
	if limit > 0 {
		n, note = limit/4, fmt.Sprintf("a quarter of %d bytes, %s", limit, what)
	}
	if n < maxBody {
		n, note = maxBody, note+", raised to max_body_bytes"
	}
	return n, note
}

// maxLagMemory returns max_lag_memory, or its default: a quarter of the
// memory the process may use (DefaultMaxLagMemory when that is not known);
// and a note for the log saying where it comes from.
func maxLagMemory(cfg *config.Config, limit int64, what string) (int64, string) {
	switch {
	case cfg.MaxLagMemory > 0:
		return cfg.MaxLagMemory, "configured"
	case limit > 0:
		return limit / 4, fmt.Sprintf("a quarter of %d bytes, %s", limit, what)
	}
	return proxy.DefaultMaxLagMemory, "the default: the memory the process may use is not known"
}

// systemMemoryLimit is memoryLimit for this process.
func systemMemoryLimit() (int64, string) {
	return memoryLimit(readSystemFile, debug.SetMemoryLimit(-1))
}

// readSystemFile reads the files memoryLimit reads: os.ReadFile, but for
// the tests, which read nothing outside the repository.
var readSystemFile = os.ReadFile
