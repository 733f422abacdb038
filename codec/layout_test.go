package codec

import (
	"testing"
	"unsafe"
)

// TestParserSize keeps the parse state of a connection that has never put
// to a pointer and two small fields: every connection, idle ones included,
// carries a Parser inside its session.
func TestParserSize(t *testing.T) {
	if n := unsafe.Sizeof(Parser{}); n > 16 {
		t.Errorf("a Parser is %d bytes; keep what only a put needs in putState", n)
	}
	p := NewParser(100)
	var cmd Command
	for _, in := range []string{"reserve\r\n", "use foo\r\n", "put 0 0 0 x\r\n", "put 0 0 0 5 junk\r\n"} {
		p.Parse([]byte(in), &cmd)
	}
	if p.put != nil {
		t.Error("a connection that never sent a put header carries a putState")
	}
}
