package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/goodput/goodput/internal/urlredact"
)

// cmdHealth: `goodput health [--admin ADDR]` GETs /healthz on a running
// gateway's admin listener and exits 0 when it answers 200, 1 otherwise. It
// is the container's health check: the image has no curl or shell.
func cmdHealth(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin", "127.0.0.1:9090", "the gateway's admin listen address (serve's --admin-listen); an all-interfaces address such as :9090 is asked on loopback")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: goodput health [--admin ADDR] [--timeout D]\n\nExits 0 when GET /healthz on the gateway's admin listener answers 200, 1 otherwise.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "goodput health: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "goodput health: --timeout %v: want a positive duration\n", *timeout)
		return 2
	}
	url, err := healthURL(*admin)
	if err != nil {
		fmt.Fprintln(stderr, "goodput health:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintln(stderr, "goodput health:", err)
		return 2
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "goodput health: unhealthy: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "goodput health: unhealthy: GET %s: %s %s\n", url, resp.Status, strings.TrimSpace(string(body)))
		return 1
	}
	fmt.Fprintf(stdout, "healthy: GET %s: %s\n", url, resp.Status)
	return 0
}

// healthURL turns an admin listen address into the URL of its /healthz; an
// address that listens on every interface (":9090", "0.0.0.0:9090",
// "[::]:9090") is asked on loopback.
func healthURL(admin string) (string, error) {
	if admin == "off" {
		return "", errors.New(`the admin listener is "off": there is no /healthz to ask`)
	}
	if strings.Contains(admin, "://") {
		// A password in it is not quoted, however url.Parse splits it.
		return "", fmt.Errorf("--admin %q: give host:port, such as 127.0.0.1:9090", urlredact.String(admin))
	}
	host, port, err := net.SplitHostPort(admin)
	if err != nil {
		return "", fmt.Errorf("--admin %q is not host:port (such as 127.0.0.1:9090): %v", admin, err)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz", nil
}
