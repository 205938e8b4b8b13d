package compare

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/goodput/goodput/internal/remote"
)

// An answer over 64 MiB is refused as it is read, bad input said so, as
// goodput report refuses it: not read whole (a 160 MB answer took 712 MB),
// then called something other than Prometheus.
func TestPrometheusAnswerTooLarge(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[`))
		pad := []byte(strings.Repeat(" ", 1<<20))
		for i := 0; i <= remote.MaxBody>>20; i++ {
			if _, err := w.Write(pad); err != nil {
				return
			}
		}
		w.Write([]byte(`]}}`))
	}))
	defer srv.Close()
	_, err := ReadReal(context.Background(), srv.URL, RealOptions{})
	var ie *InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "answer to "+srv.URL+"/api/v1/query is larger than 64 MiB") {
		t.Errorf("error %v, want bad input naming the answer over 64 MiB", err)
	}
}
