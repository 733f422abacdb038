package codec_test

import (
	"fmt"

	"github.com/sproutmq/sprout/codec"
)

// A connection's read loop: Parse what is buffered, discard what it
// consumed, answer each command, and stop when it needs more input.
func Example() {
	p := codec.NewParser(65535)
	buffered := []byte("use jobs\r\nput 0 0 60 5\r\nhello\r\nput 0 0 60 5\r\nhel")

	var cmd codec.Command
	var out []byte
	for {
		n, ok := p.Parse(buffered, &cmd)
		buffered = buffered[n:]
		if !ok {
			break
		}
		switch {
		case cmd.Status == codec.BadFormat || cmd.Status == codec.CountedBadFormat:
			out = append(out, codec.ReplyBadFormat...)
		case cmd.Status == codec.UnknownCommand:
			out = append(out, codec.ReplyUnknownCommand...)
		case cmd.Op == codec.OpUse:
			out = codec.AppendUsing(out, string(cmd.Tube))
		case cmd.Op == codec.OpPutBody && cmd.Status == codec.OK:
			out = codec.AppendInserted(out, 1)
		}
	}
	fmt.Printf("%q\nwaiting for the rest of a body: %v, unconsumed: %d bytes\n", out, p.InBody(), len(buffered))
	// Output:
	// "USING jobs\r\nINSERTED 1\r\n"
	// waiting for the rest of a body: true, unconsumed: 0 bytes
}
