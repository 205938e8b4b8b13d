package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkLoadTenantsFile reads a tenants file of 2,000 tenants with 5
// keys each (every key with a limit) and 24 per-model limits each (4 MB),
// a tenth of a platform's: what a reload and the start spend before the
// limiters.
//
//	go test -run '^$' -bench LoadTenantsFile -benchtime 5x ./identity
func BenchmarkLoadTenantsFile(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("tenants:\n")
	for t := range 2000 {
		fmt.Fprintf(&sb, "  - name: t%05d\n    limits: {rpm: 100000, tpm: 100000000, max_concurrency: 500}\n    models:\n", t)
		for m := range 24 {
			fmt.Fprintf(&sb, "      model-%02d: {tpm: 1000000, max_concurrency: 100}\n", m)
		}
		sb.WriteString("    keys:\n")
		for k := range 5 {
			sum := sha256.Sum256(fmt.Appendf(nil, "key-%d-%d", t, k))
			fmt.Fprintf(&sb, "      - id: t%05d-k%d\n        sha256: %q\n        limits: {rpm: 60000}\n", t, k, hex.EncodeToString(sum[:]))
		}
	}
	path := filepath.Join(b.TempDir(), "tenants.yaml")
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(sb.Len()))
	b.ReportAllocs()
	for b.Loop() {
		ts, err := LoadTenantsFile(path)
		if err != nil || len(ts) != 2000 {
			b.Fatalf("%d tenants, %v", len(ts), err)
		}
	}
}
