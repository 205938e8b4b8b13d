package proxy

import (
	"testing"
	"time"

	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/slo"
	"github.com/prometheus/client_golang/prometheus"
)

// heldEngine answers each request with a stream head and its first event,
// then holds the stream until release is closed.
func heldEngine(t *testing.T, release <-chan struct{}) *rawUpstream {
	return startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		_ = writeChunk(c, vllmEvents[1])
		<-release
		_ = writeChunk(c, "data: [DONE]\n\n")
		endChunks(c)
	})
}

var allClass = map[string]*slo.Class{"all": {E2E: cfgtypes.Duration(5 * time.Second), Objective: 0.9}}

// A request that cannot queue is begun (the sinks' Begin: the in-flight
// gauge, the SLO live view) once it is written upstream, off its way to
// the engine, and before its answer is read: it is in flight while the
// engine streams, once, and no longer after its record.
func TestBegunWhileTheEngineStreams(t *testing.T) {
	release := make(chan struct{})
	up := heldEngine(t, release)
	m := startMetered(t, Config{Upstream: up.URL()}, allClass, "all")
	s := startStream(t, m.URL()+"/v1/chat/completions", chatBody, nil)
	if got := m.sum(t, "goodput_in_flight_requests", nil); got != 1 {
		t.Errorf("in flight while the engine streams: %v, want 1", got)
	}
	close(release)
	if e := s.end(t); e.err != nil {
		t.Fatal(e.err)
	}
	m.settle(t)
	if got := m.sum(t, "goodput_in_flight_requests", nil); got != 0 {
		t.Errorf("in flight after the record: %v", got)
	}
}

// A request that may wait in the queue is begun before admission: it is in
// flight while it waits, before the engine has seen it.
func TestBegunWhileQueued(t *testing.T) {
	release := make(chan struct{})
	up := heldEngine(t, release)
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{MaxConcurrency: 1})
	reg := prometheus.NewRegistry()
	gate, err := ratelimit.New(ratelimit.BackendConfig{MaxQueueWait: cfgtypes.Duration(5 * time.Second)}, []ratelimit.TenantConfig{tc}, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gate.Close() })
	store, err := identity.NewStore([]ratelimit.TenantConfig{tc}, gate)
	if err != nil {
		t.Fatal(err)
	}
	m := startMetered(t, Config{Upstream: up.URL(), Keys: store, Limits: gate}, allClass, "all")
	holder := startStream(t, m.URL()+"/v1/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + key})
	conn := rawPost(t, m.addr, chatBody, "Authorization: Bearer "+key+"\r\n")
	defer conn.Close()
	for deadline := time.Now().Add(10 * time.Second); gaugeValue(t, reg, "goodput_ratelimit_queued_requests") != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second request never queued")
		}
	}
	if got := m.sum(t, "goodput_in_flight_requests", nil); got != 2 {
		t.Errorf("in flight with one streaming and one queued: %v, want 2", got)
	}
	if n := up.accepts.Load(); n != 1 {
		t.Errorf("the engine accepted %d connections, want 1 (the queued request has not gone upstream)", n)
	}
	conn.Close() // the queued client leaves: its record ends it
	close(release)
	if e := holder.end(t); e.err != nil {
		t.Fatal(e.err)
	}
	m.settle(t)
	if got := m.sum(t, "goodput_in_flight_requests", nil); got != 0 {
		t.Errorf("in flight after the records: %v", got)
	}
}
