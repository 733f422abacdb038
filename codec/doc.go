// Package codec turns the bytes a beanstalkd client sends into commands, and
// commands' results into the bytes beanstalkd would send back. It knows the
// wire and nothing else: no sockets, tubes, jobs or stores.
//
// # Input
//
// Each connection owns a Parser. Whenever input arrives, the connection
// hands Parse everything it has buffered but not yet consumed, discards the
// n bytes Parse reports, and handles the command if there is one, looping
// until Parse says it needs more input:
//
//	for {
//		n, ok := p.Parse(buf, &cmd)
//		buf = buf[n:] // and discard n from the connection's buffer
//		if !ok {
//			break // wait for more input
//		}
//		handle(&cmd)
//	}
//
// Parse is a small state machine. Between commands it waits for a whole
// line and consumes nothing until one is there, so a partial line stays in
// the caller's buffer. A line is found exactly as beanstalkd 1.13 finds it,
// which decides where over-long lines end and what they swallow: only the
// first LineMax bytes are searched, only the first '\r' counts, and a line
// that does not fit is thrown away in LineMax chunks and answered with a
// single BAD_FORMAT. A put header switches the parser to counting out the
// body (bytes+2 of them, whatever they contain), which it hands over in
// place if it is all in the input, else copies into the one buffer it ever
// allocates as its parts come, or, for a body over the size limit, throws
// away before reporting JOB_TOO_BIG. A caller that can put a body's bytes
// into that buffer itself (the engine reads the socket there) asks for the
// space with BodySpace and reports what it wrote with BodyFilled. The
// buffer is not zeroed: every byte is written before the body is complete. What a put needs between its header and
// its body is made at a connection's first put, so idle connections, which
// every server has many of, carry only a few bytes of parse state.
//
// Command lines are matched by prefix in beanstalkd's order, and arguments
// are parsed with beanstalkd's quirks (see the Status constants and the
// tests, which list them), so Sprout answers malformed input the way
// beanstalkd does. Command.Tube, and Command.Body when it came whole
// (Command.BodyAliased), alias the caller's input to avoid a copy; a body
// that came in parts is the caller's to keep.
//
// # Output
//
// Replies are appended to a caller-supplied slice (Append*) or are
// constants (Reply*), so writing a reply does not allocate once the output
// buffer has grown. The stats encoders produce the YAML documents of
// beanstalkd 1.13 byte for byte, key order and quoting included; AppendOK
// frames them.
package codec
