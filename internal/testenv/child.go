package testenv

import (
	"os/exec"
	"testing"
)

// StartChild starts cmd, a server a test runs (Prometheus, Jaeger), with
// its output kept and the kernel told to kill it if the test process dies
// (ChildAttr). It is killed when the test ends, its output logged if the
// test failed; exited is closed once it has exited.
func StartChild(t testing.TB, name string, cmd *exec.Cmd) (out *SyncBuffer, exited <-chan struct{}) {
	t.Helper()
	cmd.SysProcAttr = ChildAttr()
	out = &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	return out, done
}
