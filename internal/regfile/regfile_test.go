package regfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadFileRegular(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(path, []byte("tenants: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := ReadFile(path)
	if err != nil || string(b) != "tenants: []\n" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "none")); !os.IsNotExist(err) {
		t.Fatalf("a missing file: %v, want not-exist", err)
	}
}

func TestReadFileRefusesADirectory(t *testing.T) {
	if _, err := ReadFile(t.TempDir()); err == nil || !strings.Contains(err.Error(), "a directory") {
		t.Fatalf("a directory: %v", err)
	}
}
