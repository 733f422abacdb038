/*
 * Copyright (c) 2021 The Gnet Authors. All rights reserved.
 *
 * Licensed under the Apache License, Version 2.0 (the "License");
 * you may not use this file except in compliance with the License.
 * You may obtain a copy of the License at
 *
 *      http://www.apache.org/licenses/LICENSE-2.0
 *
 * Unless required by applicable law or agreed to in writing, software
 * distributed under the License is distributed on an "AS IS" BASIS,
 * WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 * See the License for the specific language governing permissions and
 * limitations under the License.
 *
 */

package gnet

import (
	"io"

	"golang.org/x/sys/unix"

	"github.com/panjf2000/gnet/v2/pkg/netpoll"
	"github.com/panjf2000/gnet/v2/pkg/queue"
)

func (c *conn) processIO(_ int, ev netpoll.IOEvent, _ netpoll.IOFlags) error {
	el := c.loop
	// First check for any unexpected non-IO events.
	// For these events we just close the connection directly.
	// The remote's half-close alone is not one for a HalfCloseHandler.
	if ev&netpoll.ReadWriteEvents == 0 &&
		(ev&netpoll.ErrEvents != 0 || (ev&unix.EPOLLRDHUP != 0 && el.halfCloser() == nil)) {
		c.outboundBuffer.Release() // don't bother to write to a connection that is already broken
		return el.close(c, io.EOF)
	}
	// Secondly, check for EPOLLOUT before EPOLLIN, the former has a higher priority
	// than the latter regardless of the aliveness of the current connection:
	//
	// 1. When the connection is alive and the system is overloaded, we want to
	// offload the incoming traffic by writing all pending data back to the remotes
	// before continuing to read and handle requests.
	// 2. When the connection is dead, we need to try writing any pending data back
	// to the remote first and then close the connection.
	//
	// We perform eventloop.write for EPOLLOUT because it can take good care of either case.
	if ev&(netpoll.WriteEvents|netpoll.ErrEvents) != 0 {
		if err := el.write(c); err != nil {
			return err
		}
	}
	// Check for EPOLLIN before EPOLLRDHUP in case that there are pending data in
	// the socket buffer.
	if ev&(netpoll.ReadEvents|netpoll.ErrEvents) != 0 {
		if err := el.read(c); err != nil {
			return err
		}
	}
	// Ultimately, check for EPOLLRDHUP, this event indicates that the remote has
	// either closed connection or shut down the writing half of the connection.
	if ev&unix.EPOLLRDHUP != 0 && c.opened && !c.readClosed {
		if c.readPaused { // the end waits behind what is not read yet
			return el.pausedEnd(c)
		}
		if ev&unix.EPOLLIN == 0 { // unreadable EPOLLRDHUP, close the connection directly
			if h := el.halfCloser(); h != nil {
				return el.halfClose(c, h)
			}
			return el.close(c, io.EOF)
		}
		// Received the event of EPOLLIN|EPOLLRDHUP, but the previous eventloop.read
		// failed to drain the socket buffer, so we ensure to get it done this time.
		c.isEOF = true
		return el.read(c)
	}
	return nil
}

// pausedEnd tells a PausedEndHandler, once, that the remote of c, whose
// reading is paused, has ended its writing side. Level-triggered, the
// poller stops reporting the end, which it would do at every poll.
func (el *eventloop) pausedEnd(c *conn) error {
	h := el.pausedEnder()
	if h == nil || c.pausedEndTold {
		return nil
	}
	c.pausedEndTold = true
	if !el.engine.opts.EdgeTriggeredIO {
		if err := c.stopReading(); err != nil {
			return el.close(c, err)
		}
	}
	return el.handleAction(c, h.OnPausedEnd(c))
}

// watchWritable has the poller report c writable, and readable too unless
// c no longer reads (HalfCloseHandler) or reading is paused.
func (c *conn) watchWritable(isET bool) error {
	if (c.readClosed || c.readPaused) && !isET {
		return c.notReading(true)
	}
	return c.loop.poller.ModReadWrite(&c.pollAttachment, isET)
}

// unwatchWritable stops the poller reporting c writable, in level-triggered
// mode once its pending writes are sent.
func (c *conn) unwatchWritable() error {
	if c.readClosed || c.readPaused {
		return c.notReading(false)
	}
	return c.loop.poller.ModRead(&c.pollAttachment, false)
}

// stopReading has the poller stop reporting c readable once its remote has
// shut down its writing side (level-triggered, the end of file would be
// reported at every poll; edge-triggered, no new edge comes), or while
// reading is paused (edge-triggered, read checks readPaused).
func (c *conn) stopReading() error {
	if c.loop.engine.opts.EdgeTriggeredIO {
		return nil
	}
	return c.notReading(!c.outboundBuffer.IsEmpty())
}

// notReading sets the level-triggered mask of c when it does not read:
// writable while write, and the remote's end while reading is paused for
// a PausedEndHandler not yet told of it (pausedEnd).
func (c *conn) notReading(write bool) error {
	p := c.loop.poller
	if c.readPaused && !c.readClosed && !c.pausedEndTold && c.loop.pausedEnder() != nil {
		return p.ModHangup(&c.pollAttachment, write)
	}
	if write {
		return p.ModWrite(&c.pollAttachment)
	}
	return p.ModNone(&c.pollAttachment)
}

// startReading has the poller report c readable again after a pause, and
// writable too while it has pending writes (the masks of watchWritable and
// unwatchWritable, now that reading is not paused). Edge-triggered, what
// arrived during the pause made its edge then: c is read once now.
func (c *conn) startReading() error {
	if c.loop.engine.opts.EdgeTriggeredIO {
		return c.loop.poller.Trigger(queue.LowPriority, c.loop.read0, c)
	}
	if c.outboundBuffer.IsEmpty() {
		return c.unwatchWritable()
	}
	return c.watchWritable(false)
}
