//go:build poolcheck

package proxy

import (
	"bufio"
	"reflect"
	"unsafe"

	"github.com/goodput/goodput/meter"
)

// poolCheck: built with -tags poolcheck. Every buffer given back to one
// of the gateway's pools is overwritten with poisonByte first, so that a
// use after the put shows as those bytes in what a client receives, an
// engine is sent or a record holds (a test build only: see
// poolcheck_off.go).
const poolCheck = true

// poisonByte is what a buffer given back is filled with.
const poisonByte = '~'

// poison fills b, to its capacity, with poisonByte.
func poison(b []byte) {
	b = b[:cap(b)]
	for i := range b {
		b[i] = poisonByte
	}
}

// poisonReader fills the buffer of br, a reader given back to its pool,
// with poisonByte (bufio.Reader keeps it unexported: found by its field).
func poisonReader(br *bufio.Reader) {
	f := reflect.ValueOf(br).Elem().FieldByName("buf")
	poison(*(*[]byte)(unsafe.Pointer(f.UnsafeAddr())))
}

// poisonedText is what the text fields of a record given back to its pool
// are set to.
const poisonedText = "~poisoned~"

// poisonRecord sets the text fields of rec, given back to its pool, to
// poisonedText.
func poisonRecord(rec *meter.Record) {
	rec.RequestID, rec.UpstreamRequestID, rec.ClientRequestID, rec.Tenant, rec.KeyID = poisonedText, poisonedText, poisonedText, poisonedText, poisonedText
	rec.Model, rec.Route, rec.ErrorMessage, rec.Upstream = poisonedText, poisonedText, poisonedText, poisonedText
}
