package engine

import (
	"cmp"
	"errors"

	"github.com/panjf2000/gnet/v2"
	"github.com/valyala/bytebufferpool"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// maxIovecs is the most slices one writev may take (IOV_MAX on Linux and
// the BSDs); past it the call fails and gnet would close the connection.
const maxIovecs = 1024

// refBodyMin is the smallest job body a reply references instead of
// copying: below it, one more iovec costs more than the copy.
const refBodyMin = 512

// replies is a run of replies in wire order: small ones copied into buf,
// large job bodies referenced where they are stored. A job's body never
// changes once stored (store.Job.Body), so a reference stays valid for as
// long as the reply holds it, even if the job is deleted meanwhile.
//
// A replies value belongs to one connection's event loop.
type replies struct {
	buf  []byte
	refs []bodyRef
	// referenced is the sum of len(body) over refs.
	referenced int
	// vecs is Writev's scratch, kept to avoid an allocation per write.
	vecs [][]byte
	// keep is the largest buffer kept once everything is written; 0 means
	// keepHeld. A loop's batch keeps more than a connection's held replies:
	// there is one per loop, and dropping it would make every large batch
	// garbage (a stats flood grew RSS by the heap's whole GC headroom).
	keep int
}

// Buffer sizes replies keep when emptied: a connection's held replies,
// and a loop's batch (at most an output cap of small replies; bodies are
// referenced).
const (
	keepHeld  = 64 << 10
	keepBatch = 4 << 20
)

// bodyRef puts body on the wire after buf[:at] and before buf[at:].
type bodyRef struct {
	at   int
	body []byte
}

// size is the number of bytes the replies put on the wire.
func (r *replies) size() int { return len(r.buf) + r.referenced }

func (r *replies) empty() bool { return len(r.buf) == 0 && len(r.refs) == 0 }

// appendJob appends a RESERVED or FOUND reply; body is the stored body,
// "\r\n" included.
func (r *replies) appendJob(word string, id uint64, body []byte) {
	if len(body) < refBodyMin {
		r.buf = codec.AppendJob(r.buf, word, id, body)
		return
	}
	r.buf = codec.AppendJobHeader(r.buf, word, id, len(body))
	r.refs = append(r.refs, bodyRef{at: len(r.buf), body: body})
	r.referenced += len(body)
}

// writeTo writes the first end bytes of buf, with the bodies referenced
// among them (a reference at end belongs to the reply that ends there),
// drops them, and returns how many bytes it wrote. gnet sends what the socket takes at once and copies only the
// rest into its outbound buffer, which the per-connection output cap bounds.
func (r *replies) writeTo(c gnet.Conn, end int) int {
	nrefs := 0
	for nrefs < len(r.refs) && r.refs[nrefs].at <= end {
		nrefs++
	}
	if nrefs == 0 {
		if end > 0 {
			_, _ = c.Write(r.buf[:end])
		}
	} else {
		vecs := r.vecs[:0]
		from := 0
		for _, ref := range r.refs[:nrefs] {
			if ref.at > from {
				vecs = append(vecs, r.buf[from:ref.at])
			}
			vecs = append(vecs, ref.body)
			from = ref.at
			if len(vecs) >= maxIovecs-1 {
				_, _ = c.Writev(vecs)
				clear(vecs)
				vecs = vecs[:0]
			}
		}
		if end > from {
			vecs = append(vecs, r.buf[from:end])
		}
		if len(vecs) > 0 {
			_, _ = c.Writev(vecs)
		}
		clear(vecs) // drop the references to bodies and buf
		r.vecs = vecs[:0]
	}
	n := end
	for _, ref := range r.refs[:nrefs] {
		n += len(ref.body)
	}
	r.drop(end, nrefs)
	return n
}

// drop removes buf[:end] and the first nrefs references.
func (r *replies) drop(end, nrefs int) {
	for _, ref := range r.refs[:nrefs] {
		r.referenced -= len(ref.body)
	}
	if end == len(r.buf) && nrefs == len(r.refs) {
		r.reset()
		return
	}
	r.buf = append(r.buf[:0], r.buf[end:]...)
	n := copy(r.refs, r.refs[nrefs:])
	clear(r.refs[n:])
	r.refs = r.refs[:n]
	for i := range r.refs {
		r.refs[i].at -= end
	}
}

// moveTail appends src's replies from byte from on (with their references)
// to r and cuts them off src.
func (r *replies) moveTail(src *replies, from int) {
	base := len(r.buf)
	r.buf = append(r.buf, src.buf[from:]...)
	keep := len(src.refs)
	for keep > 0 && src.refs[keep-1].at > from {
		keep--
	}
	for _, ref := range src.refs[keep:] {
		r.refs = append(r.refs, bodyRef{at: base + ref.at - from, body: ref.body})
		r.referenced += len(ref.body)
		src.referenced -= len(ref.body)
	}
	clear(src.refs[keep:])
	src.refs = src.refs[:keep]
	src.buf = src.buf[:from]
}

// reset empties r, keeping buf's capacity unless it has grown past keep:
// an idle connection should not keep a big buffer.
func (r *replies) reset() {
	clear(r.refs)
	r.refs = r.refs[:0]
	r.referenced = 0
	if cap(r.buf) > cmp.Or(r.keep, keepHeld) {
		r.buf = nil
	} else {
		r.buf = r.buf[:0]
	}
}

// docPool holds the scratch buffers YAML documents are built in before
// their length is known.
var docPool bytebufferpool.Pool

// appendYAML appends "OK <n>\r\n<doc>\r\n" with doc built by build, using
// a pooled scratch buffer so the length is known before the header.
func (r *replies) appendYAML(build func([]byte) []byte) {
	doc := docPool.Get()
	doc.B = build(doc.B)
	r.buf = codec.AppendOK(r.buf, doc.B)
	docPool.Put(doc)
}

// add appends a fixed reply.
func (r *replies) add(reply string) { r.buf = append(r.buf, reply...) }

func (r *replies) okOrNotFound(ok bool, reply string) {
	if !ok {
		reply = codec.ReplyNotFound
	}
	r.add(reply)
}

// replyFor maps a store error: nil is ok, ErrNotFound is NOT_FOUND, and a
// refusal by the log is failed.
func (r *replies) replyFor(err error, ok, failed string) {
	switch {
	case err == nil:
		r.add(ok)
	case errors.Is(err, store.ErrNotFound):
		r.add(codec.ReplyNotFound)
	default:
		r.add(failed)
	}
}
