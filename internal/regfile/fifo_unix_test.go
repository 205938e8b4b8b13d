//go:build unix

package regfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO in the file's place is an error at once: os.ReadFile
// waited in open for a writer that never came, and the gateway's reload with
// it, so its shutdown never ended.
func TestReadFileRefusesAFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadFile(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "a named pipe") {
			t.Fatalf("a FIFO: %v, want an error naming it", err)
		}
	case <-time.After(10 * time.Second):
		// Unblock the open so the goroutine ends, then fail.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("ReadFile waited on a FIFO")
	}
}
