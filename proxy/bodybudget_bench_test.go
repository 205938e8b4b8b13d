package proxy

import (
	"strconv"
	"testing"

	"github.com/goodput/goodput/identity"
	"github.com/valyala/fasthttp"
)

// benchHead returns a request head as the header hook sees it: a chat
// request with a body of n bytes, a tenant and a request id.
func benchHead(n int) *fasthttp.RequestHeader {
	h := new(fasthttp.RequestHeader)
	h.SetMethod("POST")
	h.SetRequestURI("/v1/chat/completions")
	h.SetHost("gateway")
	h.SetContentType("application/json")
	h.Set("X-Tenant", "acme")
	h.Set("X-Request-Id", "req-"+strconv.Itoa(n))
	h.SetContentLength(n)
	return h
}

// BenchmarkBodyBudget runs, per request, what the request path does with a
// body's bookkeeping, each goroutine (a connection) with its own header:
// the header hook's hold (heldhead.go: into the connection's own
// heldHead) and the body budget's size, reserve
// (a counted body only), then the handler's take and release. Each case
// runs with one Proxy (one budget) shared by every
// goroutine, as the gateway does, and with one per goroutine (the same
// operations, the same locks, never contended: the baseline in the same
// run).
//
//	go test -run '^$' -bench BodyBudget -cpu 1,2,4 -count 6 ./proxy
//
// The cases: small, a 1 KiB body (not counted: the budget's locks are not
// taken); large, a 64 KiB body (counted: reserve and take each take the
// lock of the header's table); small-pending, a 1 KiB body while another
// header's reservation is pending (take looks it up under its table's lock
// only when both headers share a table, 1 in 64: this case measured the
// one lock the budget had before its tables were split, and now measures
// mostly the count that spares the lock); budget-large, the budget's
// operations alone for a 64 KiB body; hold, the header hook's hold alone.
func BenchmarkBodyBudget(b *testing.B) {
	const maxBody = 16 << 20
	newP := func() *Proxy {
		p := &Proxy{budget: newBodyBudget(1<<40, 0, func(string, ...any) {})}
		p.cfg.TenantHeader = "X-Tenant"
		p.cfg.MaxBodyBytes = maxBody
		return p
	}
	// one runs a request's body bookkeeping as the request path does.
	one := func(p *Proxy, hh *heldHead, h *fasthttp.RequestHeader, hold, budget bool) {
		if hold {
			p.hold(hh, h, 1, 1, identity.KeyInfo{}, false)
		}
		if budget {
			if size := bodySize(h, maxBody); size != 0 && !p.budget.reserve(h, size) {
				panic("refused")
			}
			p.budget.release(p.budget.take(h))
		}
	}
	cases := []struct {
		name         string
		size         int
		pending      bool
		hold, budget bool
	}{
		{"small", 1 << 10, false, true, true},
		{"large", 64 << 10, false, true, true},
		{"small-pending", 1 << 10, true, true, true},
		{"budget-large", 64 << 10, false, false, true},
		{"hold", 1 << 10, false, true, false},
	}
	for _, c := range cases {
		for _, shared := range []bool{true, false} {
			name := c.name + "/own"
			if shared {
				name = c.name + "/shared"
			}
			b.Run(name, func(b *testing.B) {
				var sp *Proxy
				if shared {
					sp = newP()
				}
				// stuck is a reservation no handler takes.
				stuck := benchHead(64 << 10)
				if c.pending && shared && !sp.budget.reserve(stuck, 64<<10) {
					b.Fatal("refused")
				}
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					p := sp
					if p == nil {
						p = newP()
						if c.pending && !p.budget.reserve(stuck, 64<<10) {
							panic("refused")
						}
					}
					h := benchHead(c.size)
					var hh heldHead // the connection's
					for pb.Next() {
						one(p, &hh, h, c.hold, c.budget)
					}
				})
			})
		}
	}
}
