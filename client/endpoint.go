package client

import (
	"crypto/rand"
	"encoding/hex"
	"maps"
	"runtime"
	"slices"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/internal/actorenv"
	"github.com/scanplane/scanplane/messages"
)

// receive is the client endpoint actor: it hands each message to the
// inbox of its request. It runs on the goroutine that delivers the
// message (the remote reader of the sender's connection: a synchronized
// dispatcher), not on a goroutine started per burst of messages, so a
// row batch reaches the goroutine reading its stream with one goroutine
// hand-off, not two. It never blocks: it looks the inbox up and appends
// (a straggler's Cancel is a send, which waits only for protoactor's
// first connection to that address, as it would on any goroutine).
func (c *Client) receive(ctx actor.Context) {
	var id string
	switch m := ctx.Message().(type) {
	case *messages.RowBatch:
		id = m.GetRequestId()
	case *messages.ScanFinished:
		id = m.GetRequestId()
	case *messages.ScanError:
		id = m.GetRequestId()
	case *messages.ScanRouted:
		id = m.GetRequestId()
	case *messages.ScanProgress:
		id = m.GetRequestId()
	default:
		return
	}
	c.mu.Lock()
	in := c.inboxes[id]
	c.mu.Unlock()
	if in != nil {
		in.put(ctx.Message())
		if in.handOff {
			// Its reader, just readied, runs on this processor now,
			// before the messages of other streams behind this one.
			runtime.Gosched()
		}
	} else if b, ok := ctx.Message().(*messages.RowBatch); ok {
		// A straggler of a finished request: stop it.
		if p := b.GetServerPid(); p != nil {
			c.send(actor.NewPID(p.Address, p.Id), &messages.Cancel{RequestId: b.RequestId, Attempt: b.Attempt, Reason: "request already done"})
		}
	}
}

// endpointProps is the endpoint actor's: receive on the delivering
// goroutine.
func (c *Client) endpointProps() *actor.Props {
	return actor.PropsFromFunc(c.receive, actor.WithDispatcher(actorenv.InlineDispatcher()))
}

// coordEvent tells a running stream that a coordinator was lost or is up.
type coordEvent struct {
	addr string
	lost bool
	why  string
}

// openStream registers a tablet stream's inbox for coordinator events and
// returns the coordinator list and the lost ones at this moment (events
// after it reach the inbox).
func (c *Client) openStream() (in *inbox, coords []string, lost map[string]string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, nil, ErrClosed
	}
	in = newInbox()
	c.streams[in] = struct{}{}
	if len(c.coord.lost) > 0 && !c.coord.probing && c.sys != nil {
		c.coord.probing = true
		go c.probe()
	}
	return in, slices.Clone(c.coord.list), maps.Clone(c.coord.lost), nil
}

// register routes a request id's replies to in.
func (c *Client) register(id string, in *inbox) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.inboxes[id] = in
	return nil
}

// closeStream forgets a stream's inbox and request ids.
func (c *Client) closeStream(in *inbox, ids []string) {
	c.mu.Lock()
	delete(c.streams, in)
	for _, id := range ids {
		delete(c.inboxes, id)
	}
	c.mu.Unlock()
}

// nextRequestID returns a new request id: the client's id (for logs) and
// 128 random bits from crypto/rand, so that no one who sees or guesses
// other ids can name (and cancel) a request of this client.
func (c *Client) nextRequestID() string {
	return c.id + "-" + newRequestID()
}

// newRequestID is 128 bits from crypto/rand in hex (32 characters).
func newRequestID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand.Read does not fail on supported platforms (Go 1.24+
		// crashes the program instead); never fall back to guessable ids.
		panic("client: crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

func (c *Client) self() *messages.Pid { return &messages.Pid{Address: c.rx.Address, Id: c.rx.Id} }

// inbox is an unbounded queue of one request's messages: the endpoint
// actor must never block on a slow consumer.
type inbox struct {
	// handOff: the inbox of a short scan (one range within one tablet,
	// read in its caller's goroutine: a lookup): the endpoint actor
	// yields the processor to its reader after each message rather than
	// deliver the next ones first. Set before the stream's first request.
	handOff bool
	mu      sync.Mutex
	items   []any
	notify  chan struct{}
	closed  bool
}

func newInbox() *inbox { return &inbox{notify: make(chan struct{}, 1)} }

func (in *inbox) put(m any) {
	in.mu.Lock()
	in.items = append(in.items, m)
	in.mu.Unlock()
	select {
	case in.notify <- struct{}{}:
	default:
	}
}

func (in *inbox) close() {
	in.mu.Lock()
	in.closed = true
	in.mu.Unlock()
	select {
	case in.notify <- struct{}{}:
	default:
	}
}

// take returns the next message, or nil if none; closed reports a closed client.
func (in *inbox) take() (m any, closed bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.items) > 0 {
		m = in.items[0]
		in.items[0] = nil
		in.items = in.items[1:]
		return m, false
	}
	return nil, in.closed
}
