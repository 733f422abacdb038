package load

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// PinProcess confines every thread of process pid to cpus. Threads the
// process starts later inherit the mask from the thread that starts them;
// the list of threads is read three times so that one started meanwhile
// is caught too.
func PinProcess(pid int, cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	for range 3 {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("load: pinning process %d: %w", pid, err)
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			// A thread that has just exited is not an error.
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("load: pinning thread %d of process %d to CPUs %v: %w", tid, pid, cpus, err)
			}
		}
	}
	return nil
}
