//go:build !unix

package export

import "errors"

func mkfifo(string) error { return errors.ErrUnsupported }
