// Package gctune keeps the garbage collector's heap goal at least a fixed
// headroom above the live heap.
//
// Go's default goal is twice the live heap. A queue server's live heap is
// small when its queues are short (a few MiB), while every command makes
// garbage at a rate that does not depend on it: a 64 KiB job allocated per
// put made the collector run over a hundred times a second, and each run
// also handed memory back to the kernel that the next puts faulted in
// again. With a headroom the collector runs once per that many bytes
// allocated; once the live heap is larger than the headroom (many stored
// jobs) the default goal applies unchanged, so memory per stored job is
// what it was.
//
// The goal is re-computed after every collection, from the live heap the
// collection found. A memory limit (GOMEMLIMIT or debug.SetMemoryLimit)
// still caps the goal, as it always does.
package gctune
