//go:build storm

package engine_test

import "github.com/sproutmq/sprout/engine"

// Under the storm tag (make storm) the slowloris runs at the default
// handshake timeout, 10 s of a byte a second per connection.
func init() { slowlorisTimeout = engine.DefaultHandshakeTimeout }
