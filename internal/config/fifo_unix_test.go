//go:build unix

package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// At start the configuration may come from a pipe (/dev/stdin, a process
// substitution); a reload (SIGHUP) reads only a regular file, so a FIFO in
// its place is an error, not a read that waits for a writer.
func TestLoadFromAPipeReloadOnlyAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "goodput.yaml")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	go func() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err == nil {
			f.WriteString("listen: 127.0.0.1:0\n")
			f.Close()
		}
	}()
	c, err := Load(path)
	if err != nil || c.Listen != "127.0.0.1:0" {
		t.Fatalf("Load from a pipe: %+v, %v", c, err)
	}
	if c.Path != "" {
		t.Errorf("a configuration from a pipe has Path %q: a reload would read the pipe again", c.Path)
	}
	if _, err := Reload(path); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("Reload of a FIFO: %v, want it refused", err)
	}
}
