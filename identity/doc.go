// Package identity says who a request is: it resolves a gateway key to its
// tenant and keeps the tenants current.
//
// Keys: NewKey makes a key and its SHA-256, FormatKeyConfig the
// configuration lines for it; ExtractKey finds the key a request presents. A Keyring
// maps keys to tenants without holding any key in clear (so a key is
// found in text only by looking up the text's tokens: Store.HoldsKey,
// Store.RedactKeys); a Store holds the
// current Keyring and swaps it atomically on Reload (an invalid configuration
// keeps the old one), passing each new tenant list to its subscribers (the
// rate-limit Gate). LoadTenantsFile reads a tenants file; a FileWatch polls a
// file for changes.
//
// The tenants list itself (ratelimit.TenantConfig) and its validation are
// package ratelimit's: most of an entry is limits, which the limiters read.
package identity
