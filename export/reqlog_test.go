package export

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every record becomes exactly one line, also when many goroutines write at
// once, and Close flushes them and stops the flusher.
func TestRequestLogOneLinePerRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	l, err := OpenRequestLog(path, time.Hour, nil) // only Close flushes
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 250
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var rec meter.Record
			for i := 0; i < each; i++ {
				rec.Reset()
				rec.RequestID = "r"
				rec.Tenant = string(rune('a' + w))
				rec.ITL = append(rec.ITL, time.Millisecond, 2*time.Millisecond)
				rec.Events = 3
				l.Record(&rec)
			}
		}(w)
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l.Lines() != writers*each {
		t.Fatalf("Lines() = %d", l.Lines())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	perTenant := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		perTenant[m["tenant"].(string)]++
	}
	if len(perTenant) != writers {
		t.Fatalf("tenants %v", perTenant)
	}
	for tenant, n := range perTenant {
		if n != each {
			t.Fatalf("tenant %s: %d lines, want %d", tenant, n, each)
		}
	}
}

func TestOpenRequestLogError(t *testing.T) {
	if _, err := OpenRequestLog(filepath.Join(t.TempDir(), "missing", "x.jsonl"), 0, nil); err == nil {
		t.Fatal("opened a log in a directory that does not exist")
	}
}
