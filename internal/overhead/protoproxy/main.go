//go:build linux

// Command protoproxy is a measuring instrument for issue 12, item 3: two
// prototypes of the gateway's stream path outside fasthttp, for the
// overhead yardstick (go run ./internal/overhead --proxies
// proto-goroutine,proto-epoll) to compare with goodput and nginx. It is not
// a product: it handles what the yardstick's client sends (HTTP/1.1
// keep-alive POST requests with a Content-Length body) and what its engine
// answers (200, chunked text/event-stream), and closes the connection on
// anything else.
//
//	protoproxy --listen 127.0.0.1:8080 --upstream 127.0.0.1:8000 --model goroutine|epoll
//
// Both models parse the request head once and forward it on a pooled
// keep-alive upstream connection (dialled only when the pool is empty),
// parse the response head, decode the chunked body and, for every SSE
// event, frame it (meter.SSEFramer), parse it (meter.StreamParser, chat) and
// observe it in a meter.Meter with the time of the read that completed it,
// then write it to the client as one chunk with a non-blocking write,
// keeping the bytes the client's socket has no room for until it has.
// At the end: the terminating chunk, the meter's Finish, the upstream
// connection back to the pool, and the client's next request.
//
//   - goroutine: Go's net package, one goroutine per client connection,
//     the response read in a loop inside one syscall.RawConn.Read
//     (goroutine.go says why no wake-up is lost).
//   - epoll: one event loop per GOMAXPROCS on a locked thread, each with
//     its own epoll instance, edge-triggered, no goroutine per connection
//     (epoll.go).
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	upstream := flag.String("upstream", "127.0.0.1:8000", "the engine's address (host:port)")
	model := flag.String("model", "goroutine", "I/O model: goroutine or epoll")
	epollWait := flag.String("epoll-wait", "raw", "epoll model: how a loop waits, raw (RawSyscall on a thread of its own), syscall (syscall.EpollWait) or netpoll (a goroutine parked in Go's poller on the loop's epoll fd)")
	flag.Parse()
	if *epollWait != waitRaw && *epollWait != waitSyscall && *epollWait != waitNetpoll {
		fmt.Fprintf(os.Stderr, "protoproxy: --epoll-wait %q: raw, syscall or netpoll\n", *epollWait)
		os.Exit(2)
	}
	if err := run(*listen, *upstream, *model, *epollWait); err != nil {
		fmt.Fprintln(os.Stderr, "protoproxy:", err)
		os.Exit(1)
	}
}

func run(listen, upstream, model, wait string) error {
	switch model {
	case "goroutine":
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return err
		}
		g := &gServer{upstream: upstream}
		return g.serve(ln)
	case "epoll":
		srv, err := startEpoll(listen, upstream, wait)
		if err != nil {
			return err
		}
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		srv.stop()
		return nil
	default:
		return fmt.Errorf("--model %q: goroutine or epoll", model)
	}
}
