// Package atomicmax raises an atomic integer to at least a given value:
// the compare-and-swap loop of a high-water mark that several goroutines
// advance at once (a log's durable position, the latest stamp a request
// said it had seen, a node's commit), which must never move back.
package atomicmax
