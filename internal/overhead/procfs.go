package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// clkTck is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100
// on every Linux architecture Go runs on.
const clkTck = 100

// procStat is what the benchmark reads from /proc/PID/stat.
type procStat struct {
	ppid     int
	cpuTicks uint64 // utime + stime
}

// parseStat parses the contents of /proc/PID/stat. The command name (field
// 2) is in parentheses and may itself hold spaces and parentheses, so the
// fields are counted from the last ')'.
func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("stat: no ')' in %q", b)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); ppid is field 4, utime 14, stime 15.
	if len(f) < 13 {
		return procStat{}, fmt.Errorf("stat: %d fields after the name", len(f))
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return procStat{}, fmt.Errorf("stat: ppid %q", f[1])
	}
	ut, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	st, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return procStat{}, fmt.Errorf("stat: utime %q stime %q", f[11], f[12])
	}
	return procStat{ppid: ppid, cpuTicks: ut + st}, nil
}

// parseVmRSS returns VmRSS in KiB from the contents of /proc/PID/status.
func parseVmRSS(b []byte) (int64, error) { return parseStatusKiB(b, "VmRSS") }

// parseStatusKiB returns the field (VmRSS, VmHWM) in KiB from the contents
// of /proc/PID/status.
func parseStatusKiB(b []byte, field string) (int64, error) {
	for line := range bytes.Lines(b) {
		rest, ok := bytes.CutPrefix(line, []byte(field+":"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("status: %s line %q", field, bytes.TrimSpace(line))
		}
		return strconv.ParseInt(string(f[0]), 10, 64)
	}
	return 0, fmt.Errorf("status: no %s line", field)
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

func readStatusKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	return parseStatusKiB(b, field)
}

// children returns the pids whose parent is pid (nginx's workers).
func children(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(p)
		if err == nil && st.ppid == pid {
			out = append(out, p)
		}
	}
	return out
}

// cpuTicks sums utime+stime over pids; processes gone are skipped.
func cpuTicks(pids []int) uint64 {
	var sum uint64
	for _, p := range pids {
		if st, err := readStat(p); err == nil {
			sum += st.cpuTicks
		}
	}
	return sum
}

// rssKiB sums VmRSS over pids.
func rssKiB(pids []int) int64 { return sumStatusKiB(pids, "VmRSS") }

// sumStatusKiB sums a /proc/PID/status field over pids.
func sumStatusKiB(pids []int, field string) int64 {
	var sum int64
	for _, p := range pids {
		if r, err := readStatusKiB(p, field); err == nil {
			sum += r
		}
	}
	return sum
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := bytes.Fields(b)
	if len(f) < 3 {
		return "unknown"
	}
	return string(bytes.Join(f[:3], []byte(" ")))
}
