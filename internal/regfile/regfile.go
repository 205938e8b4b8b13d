// Package regfile reads configuration files that the gateway reads again
// while it runs (the tenants and keys file on every change or SIGHUP), so a
// path that is not a regular file cannot hang the reader: a FIFO put in
// its place, a device, a directory. It opens without waiting (a FIFO's open
// would wait for a writer), checks the descriptor it got (not the path,
// which may change in between) and reads at most a size limit.
package regfile

import (
	"fmt"
	"io"
	"os"
)

// MaxSize bounds what ReadFile reads: far above any tenants file.
const MaxSize = 64 << 20

// ReadFile reads the regular file at path. Anything else (a FIFO, a
// device, a directory) is an error naming what it is, as is a file over
// MaxSize.
func ReadFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|OpenNoWait, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, kind(fi.Mode()))
	}
	if fi.Size() > MaxSize {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a configuration file may have", path, fi.Size(), MaxSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%s grew past the %d bytes a configuration file may have", path, MaxSize)
	}
	return data, nil
}

func kind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	}
	return m.Type().String()
}
