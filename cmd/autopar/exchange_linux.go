package main

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// exchangeDirs swaps directories tmp and dir in one step with renameat2's RENAME_EXCHANGE,
// so that dir is at every instant either all old or all new. A file system without it
// (EINVAL) or an old kernel (ENOSYS) falls back to renameExchange.
func exchangeDirs(tmp, dir string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		return renameExchange(tmp, dir)
	}
	if err != nil {
		return &os.LinkError{Op: "exchange", Old: tmp, New: dir, Err: err}
	}
	return nil
}
