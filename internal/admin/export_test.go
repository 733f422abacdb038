package admin

import "github.com/sproutmq/sprout/store"

// This file exposes internals to the external tests without widening the
// API.

// SetPut replaces the store's put for the API's puts (to make the disk
// look full) until the returned restore.
func SetPut(put func(c *store.Client, id uint64, pri, delay, ttr uint32, body []byte) (*store.Job, error)) (restore func()) {
	old := putJob
	putJob = put
	return func() { putJob = old }
}

// Endpoints lists the paths the API mounts and, for each, its methods.
func Endpoints() map[string][]string {
	out := make(map[string][]string)
	for _, e := range (*API)(nil).endpoints() {
		for method := range e.handlers {
			out[e.path] = append(out[e.path], method)
		}
	}
	return out
}
