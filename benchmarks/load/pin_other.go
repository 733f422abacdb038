//go:build !linux

package load

import "errors"

// PinProcess needs Linux's sched_setaffinity.
func PinProcess(pid int, cpus []int) error {
	return errors.New("load: pinning to CPUs needs Linux")
}
