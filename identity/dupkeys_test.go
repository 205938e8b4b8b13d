package identity

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// A tenants file is re-read by the running gateway whenever it changes
// (FileWatch) and on SIGHUP, and a configuration file may be up to 64 MiB.
// A file of a few kilobytes that repeats one mapping key makes the YAML
// decoder report every pair of duplicates (n² messages, each its own
// string): 3,000 repeats of `slo: x` (33 KB) allocate 2 GB, with an error of 266 MB that the reload logs, and take
// seconds; 10,000 ran a gateway with a few GB out of memory (a
// fatal error, not a reload refused). The refusal costs about what the
// file does, and names the key's second line.
func TestTenantsFileRepeatedKeyRefusedAtItsCost(t *testing.T) {
	var b strings.Builder
	b.WriteString("tenants:\n  - name: acme\n")
	for range 3000 {
		b.WriteString("    slo: x\n")
	}
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := LoadTenantsFile(path)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), `line 4: mapping key "slo" already defined at line 3`) {
		t.Fatalf("error %v", err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("file %d bytes: refused after allocating %d MB; error %d bytes", b.Len(), alloc>>20, len(err.Error()))
	if alloc > 64<<20 || len(err.Error()) > 1<<20 {
		t.Fatalf("a %d-byte tenants file repeating one key allocated %d MB to refuse, with an error of %d bytes: the YAML decoder lists every pair of duplicates", b.Len(), alloc>>20, len(err.Error()))
	}
}
