// Package redistest runs private redis-server processes for tests that must
// do to a real Redis what cannot be done to a shared one: hang it, kill it,
// restart it, or form a cluster of several.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"github.com/goodput/goodput/internal/testenv"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process on a loopback port of its own. It
// keeps nothing on disk.
type Server struct {
	t       testing.TB
	bin     string
	port    int
	extra   []string
	dir     string
	cmd     *exec.Cmd
	release func() // closes the port's reservation while no server holds it; nil: none
}

// Binary returns the path of redis-server. Without one it skips the test,
// except in CI (CI set), where it fails: CI must run these tests against a
// real server.
func Binary(t testing.TB) string {
	t.Helper()
	return testenv.Binary(t, "redis-server", "redis-server")
}

// Start starts a redis-server with extra arguments (for example
// "--cluster-enabled", "yes") and waits until it answers PING. The server is
// killed when the test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	s := &Server{t: t, bin: Binary(t), extra: extra, dir: t.TempDir()}
	port, release, err := reservePorts(0, slices.Contains(extra, "--cluster-enabled"))
	if err != nil {
		t.Fatal(err)
	}
	s.port, s.release = port, release
	t.Cleanup(func() {
		if s.cmd != nil {
			s.cmd.Process.Signal(syscall.SIGCONT)
			s.cmd.Process.Kill()
			s.cmd.Wait()
		}
		s.unreserve()
	})
	s.Restart()
	return s
}

// unreserve closes the port's reservation, if any.
func (s *Server) unreserve() {
	if s.release != nil {
		s.release()
		s.release = nil
	}
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port is the server's port.
func (s *Server) Port() int { return s.port }

// Restart starts the server again on the same port after Kill (the first
// start too), and waits until it answers.
func (s *Server) Restart() {
	s.t.Helper()
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--loglevel", "warning", "--dir", s.dir}
	args = append(args, s.extra...)
	if !holdThroughStart {
		s.unreserve()
	}
	s.cmd = exec.Command(s.bin, args...)
	s.cmd.SysProcAttr = testenv.ChildAttr()
	out := &lockedBuffer{}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	c := s.Client()
	defer c.Close()
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if c.Ping(context.Background()).Err() == nil {
			s.unreserve()
			return
		}
		if time.Since(start) > 5*time.Second {
			s.t.Fatalf("redis-server on %s did not answer within 5s: %s", s.Addr(), out.String())
		}
	}
}

// lockedBuffer is what a server prints, read while it still runs (a start
// that failed): the race detector found the plain builder read and
// written at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Client returns a plain client of this server with short timeouts; the
// caller closes it.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
}

// Stop hangs the server (SIGSTOP): connections stay open and are even
// accepted, but nothing answers.
func (s *Server) Stop() { s.signal(syscall.SIGSTOP) }

// Continue resumes a stopped server.
func (s *Server) Continue() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatal(err)
	}
}

// Kill ends the server (a stopped one too); connections are then refused
// until Restart. Meanwhile the port stays reserved (see reserve): the
// outgoing connection of another test that took it as its local port would
// keep the server from starting again ("Address already in use").
func (s *Server) Kill() {
	s.t.Helper()
	s.signal(syscall.SIGKILL)
	s.cmd.Wait()
	s.cmd = nil
	if _, release, err := reservePorts(s.port, slices.Contains(s.extra, "--cluster-enabled")); err == nil {
		s.release = release
	}
}

// reservePorts reserves port (0: a free one), and for a cluster node its
// bus port too (port + 10000), which redis-server also binds: a bus port
// taken by another socket (an outgoing connection's local port) made a
// node of a test cluster fail to start ("Address already in use", seen in
// CI). A free port whose bus port is taken is passed over.
func reservePorts(port int, cluster bool) (int, func(), error) {
	for range 50 {
		p, release, err := reserve(port)
		if err != nil || !cluster {
			return p, release, err
		}
		if p+busOffset > 65535 {
			release()
			continue
		}
		_, busRelease, err := reserve(p + busOffset)
		if err == nil {
			return p, func() { release(); busRelease() }, nil
		}
		release()
		if port != 0 {
			return 0, nil, err
		}
	}
	return 0, nil, errors.New("no free port whose cluster bus port (+10000) is free too")
}

// busOffset is how far a cluster node's bus port is from its port.
const busOffset = 10000

// DBSize is the number of keys, or -1 when the server does not answer.
func (s *Server) DBSize() int64 {
	c := s.Client()
	defer c.Close()
	n, err := c.DBSize(context.Background()).Result()
	if err != nil {
		return -1
	}
	return n
}

// StartCluster starts n servers in cluster mode, gives each an equal range
// of the 16384 hash slots, joins them and waits until every node reports
// cluster_state:ok. It returns the nodes and a seed URL for
// redis.ParseClusterURL naming all of them.
func StartCluster(t testing.TB, n int) ([]*Server, string) {
	t.Helper()
	masters, _, url := startCluster(t, n, false, "2000")
	return masters, url
}

// StartReplicatedCluster is StartCluster with one replica per master, a
// cluster-node-timeout of nodeTimeout milliseconds, and extra arguments for
// every node (for example "--cluster-require-full-coverage", "no"). It
// returns the masters, their replicas (replicas[i] replicates masters[i])
// and a seed URL naming the masters.
func StartReplicatedCluster(t testing.TB, n int, nodeTimeout string, extra ...string) (masters, replicas []*Server, url string) {
	t.Helper()
	return startCluster(t, n, true, nodeTimeout, extra...)
}

func startCluster(t testing.TB, n int, replicate bool, nodeTimeout string, extra ...string) (masters, replicas []*Server, url string) {
	t.Helper()
	all := n
	if replicate {
		all = 2 * n
	}
	args := append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", nodeTimeout}, extra...)
	nodes := make([]*Server, all)
	for i := range nodes {
		nodes[i] = Start(t, args...)
	}
	masters, replicas = nodes[:n], nodes[n:]
	ctx := context.Background()
	const slots = 16384
	for i, s := range nodes {
		c := s.Client()
		if i < n {
			lo, hi := i*slots/n, (i+1)*slots/n-1
			if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
				c.Close()
				t.Fatalf("CLUSTER ADDSLOTSRANGE on %s: %v", s.Addr(), err)
			}
		}
		if i > 0 {
			if err := c.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", nodes[0].port).Err(); err != nil {
				c.Close()
				t.Fatalf("CLUSTER MEET: %v", err)
			}
		}
		c.Close()
	}
	waitInfo(t, nodes, fmt.Sprintf("cluster_known_nodes:%d", all))
	for i, s := range replicas {
		mc := masters[i].Client()
		id, err := mc.Do(ctx, "CLUSTER", "MYID").Text()
		mc.Close()
		if err != nil {
			t.Fatalf("CLUSTER MYID on %s: %v", masters[i].Addr(), err)
		}
		c := s.Client()
		err = c.Do(ctx, "CLUSTER", "REPLICATE", id).Err()
		c.Close()
		if err != nil {
			t.Fatalf("CLUSTER REPLICATE on %s: %v", s.Addr(), err)
		}
	}
	waitInfo(t, nodes, "cluster_state:ok")
	for _, s := range replicas {
		c := s.Client()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			info, err := c.Info(ctx, "replication").Result()
			if err == nil && strings.Contains(info, "master_link_status:up") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("replica %s not in sync after 20s: %v %s", s.Addr(), err, info)
			}
		}
		c.Close()
	}
	url = "redis://" + masters[0].Addr()
	for i, s := range masters[1:] {
		if i == 0 {
			url += "?addr=" + s.Addr()
		} else {
			url += "&addr=" + s.Addr()
		}
	}
	return masters, replicas, url
}

// waitInfo waits until CLUSTER INFO on every node holds want (20 s at
// most).
func waitInfo(t testing.TB, nodes []*Server, want string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range nodes {
		c := s.Client()
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, want) {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("cluster without %s on %s after 20s: %v %s", want, s.Addr(), err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.Close()
	}
}

// Cluster is a Redis Cluster shared by the tests of one test binary: the
// first test that asks starts it (a few seconds), and every test gets it
// empty. The package's TestMain closes it after the tests (see RunThenClose).
// Its tests must not run in parallel with each other.
type Cluster struct {
	n        int
	mu       sync.Mutex
	nodes    []*Server
	url      string
	failed   string
	cleanups []func()
}

// NewCluster describes a shared cluster of n nodes; nothing starts yet.
func NewCluster(n int) *Cluster { return &Cluster{n: n} }

// Get returns the cluster's nodes and seed URL (as StartCluster does),
// starting it on the first call, with every node emptied (FLUSHALL).
func (c *Cluster) Get(t testing.TB) ([]*Server, string) {
	t.Helper()
	Binary(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != "" {
		t.Fatalf("the shared Redis Cluster did not start: %s", c.failed)
	}
	if c.nodes == nil {
		// Cleared once the start succeeds; a start that fails (t.Fatal)
		// leaves it, and later tests fail at once instead of trying again.
		c.failed = "see the first test that asked for it"
		c.nodes, c.url = StartCluster(&clusterOwner{TB: t, c: c}, c.n)
		c.failed = ""
	}
	ctx := context.Background()
	for _, s := range c.nodes {
		cl := s.Client()
		err := cl.FlushAll(ctx).Err()
		cl.Close()
		if err != nil {
			t.Fatalf("FLUSHALL on %s: %v", s.Addr(), err)
		}
	}
	return c.nodes, c.url
}

// Close stops the cluster's servers and removes their folders.
func (c *Cluster) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.cleanups) - 1; i >= 0; i-- {
		c.cleanups[i]()
	}
	c.cleanups, c.nodes = nil, nil
}

// RunThenClose runs m's tests, then closes the clusters, so that a leak
// check wrapped around it (goleak.VerifyTestMain) sees their servers gone.
func RunThenClose(m interface{ Run() int }, clusters ...*Cluster) interface{ Run() int } {
	return runThenClose{m, clusters}
}

type runThenClose struct {
	m        interface{ Run() int }
	clusters []*Cluster
}

func (r runThenClose) Run() int {
	code := r.m.Run()
	for _, c := range r.clusters {
		c.Close()
	}
	return code
}

// clusterOwner lends the first test's failure reporting to the start of a
// shared cluster, while the servers' cleanups and folders belong to the
// cluster, which outlives that test.
type clusterOwner struct {
	testing.TB
	c *Cluster
}

func (o *clusterOwner) Cleanup(f func()) { o.c.cleanups = append(o.c.cleanups, f) }

func (o *clusterOwner) TempDir() string {
	dir, err := os.MkdirTemp("", "redistest")
	if err != nil {
		o.Fatal(err)
	}
	o.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
