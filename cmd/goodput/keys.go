package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/ratelimit"
)

// cmdKeys: `goodput keys new --tenant acme --id acme-prod` prints a fresh
// key (shown once, never stored) and the configuration lines with its hash.
func cmdKeys(args []string, stdout, stderr io.Writer) int {
	const usage = "usage: goodput keys new --tenant NAME --id KEY_ID"
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprintln(stdout, usage)
		return 0
	}
	if len(args) == 0 || args[0] != "new" {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("keys new", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage+"\n\nPrints a new gateway key for the tenant, and the lines to put in its configuration\n(only the key's SHA-256 is kept).\n\nFlags:")
		fs.PrintDefaults()
	}
	tenant := fs.String("tenant", "", "tenant the key belongs to (required)")
	id := fs.String("id", "", "key id shown in logs and metrics, never the key itself (required)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		// Flags after it were not read (Go's flag package stops there).
		fmt.Fprintf(stderr, "goodput keys new: unexpected argument %q (flags go before any argument, and keys new takes none)\n", fs.Arg(0))
		return 2
	}
	if *tenant == "" || *id == "" {
		fmt.Fprintln(stderr, "goodput keys new: --tenant and --id are required")
		return 2
	}
	for _, v := range []struct {
		flag, val string
		check     func(string) error
	}{{"--tenant", *tenant, ratelimit.ValidateTenantName}, {"--id", *id, ratelimit.ValidateID}} {
		if err := v.check(v.val); err != nil {
			fmt.Fprintf(stderr, "goodput keys new: %s: %v\n", v.flag, err)
			return 2
		}
	}
	key, hash, err := identity.NewKey()
	if err != nil {
		fmt.Fprintln(stderr, "goodput keys new:", err)
		return 1
	}
	fmt.Fprintf(stdout, "key: %s\n\n", key)
	fmt.Fprintf(stdout, "# Give the key to the tenant now: it is not stored anywhere and cannot be shown again.\n")
	fmt.Fprintf(stdout, "# Add these lines under the keys: of tenant %q, then reload (SIGHUP) or let the gateway notice the change:\n", *tenant)
	fmt.Fprint(stdout, identity.FormatKeyConfig(*id, hash))
	return 0
}
