package bus

import (
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
)

// ErrBadSignal is returned (wrapped) when a signal cannot be published
// because a field that names its subject is missing or the kind is unknown.
var ErrBadSignal = errors.New("bus: bad signal")

// SignalKind tells a busy event from a timeout event.
type SignalKind int

const (
	// SignalBusy: a scan server answered Busy (scanplane.v1.busy.*).
	SignalBusy SignalKind = iota + 1
	// SignalTimeout: a scan server did not answer within the busy timeout
	// (scanplane.v1.timeout.*).
	SignalTimeout
)

func (k SignalKind) String() string {
	switch k {
	case SignalBusy:
		return "busy"
	case SignalTimeout:
		return "timeout"
	}
	return fmt.Sprintf("SignalKind(%d)", int(k))
}

// Subscription is one or more NATS subscriptions; Close ends them all.
type Subscription struct {
	subs []*nats.Subscription
}

// Close unsubscribes. The callback is not called after Close returns,
// except for a call already running.
func (s *Subscription) Close() error {
	var errs []error
	for _, sub := range s.subs {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// publish marshals m and publishes it on subject (buffered; errors are
// local: closed connection, payload too large).
func (c *Conn) publish(subject string, m proto.Message) error {
	data, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("bus: encode %s: %w", subject, err)
	}
	if err := c.nc.Publish(subject, data); err != nil {
		return fmt.Errorf("bus: publish %s: %w", subject, err)
	}
	return nil
}

// decodeFailed counts and logs a payload that did not decode.
func (c *Conn) decodeFailed(msg *nats.Msg, err error) {
	n := c.decodeErrors.Add(1)
	if !c.warnings.Allow() {
		return
	}
	c.log.Warn("dropping undecodable message", "subject", msg.Subject, "bytes", len(msg.Data), "err", err, "decode_errors", n)
}

// PublishHeartbeat publishes hb on HeartbeatSubject(hb.Host, hb.Server).
func (c *Conn) PublishHeartbeat(hb *messages.Heartbeat) error {
	if hb.GetHost() == "" || hb.GetServer() == "" {
		return fmt.Errorf("%w: heartbeat needs host and server (got %q, %q)", ErrBadSignal, hb.GetHost(), hb.GetServer())
	}
	return c.publish(HeartbeatSubject(hb.Host, hb.Server), hb)
}

// SubscribeHeartbeats calls fn with every heartbeat of every server. A
// heartbeat whose host and server are not the ones its subject names
// (CheckSignalSubject) is dropped, logged and counted
// (MismatchedSignals).
func (c *Conn) SubscribeHeartbeats(fn func(*messages.Heartbeat)) (*Subscription, error) {
	sub, err := subscribeDecoded(c, hbPrefix+">", func(subject string, hb *messages.Heartbeat) {
		if c.signalSubjectOK(subject, hb.GetHost(), hb.GetServer()) {
			fn(hb)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe heartbeats: %w", err)
	}
	return &Subscription{subs: []*nats.Subscription{sub}}, nil
}

// PublishSignal publishes a busy or timeout event on the subject of
// sig.Host and sig.Server.
func (c *Conn) PublishSignal(kind SignalKind, sig *messages.LoadSignal) error {
	if sig.GetHost() == "" || sig.GetServer() == "" {
		return fmt.Errorf("%w: %s signal needs host and server (got %q, %q)", ErrBadSignal, kind, sig.GetHost(), sig.GetServer())
	}
	switch kind {
	case SignalBusy:
		return c.publish(BusySubject(sig.Host, sig.Server), sig)
	case SignalTimeout:
		return c.publish(TimeoutSubject(sig.Host, sig.Server), sig)
	}
	return fmt.Errorf("%w: unknown kind %s", ErrBadSignal, kind)
}

// SubscribeSignals calls fn with every busy and timeout event. One
// whose host and server are not the ones its subject names
// (CheckSignalSubject) is dropped, logged and counted
// (MismatchedSignals).
func (c *Conn) SubscribeSignals(fn func(SignalKind, *messages.LoadSignal)) (*Subscription, error) {
	// Two subscriptions deliver on two goroutines: serialise fn.
	var mu sync.Mutex
	s := &Subscription{}
	for _, kind := range []SignalKind{SignalBusy, SignalTimeout} {
		prefix := busyPrefix
		if kind == SignalTimeout {
			prefix = timeoutPrefix
		}
		sub, err := subscribeDecoded(c, prefix+">", func(subject string, sig *messages.LoadSignal) {
			if !c.signalSubjectOK(subject, sig.GetHost(), sig.GetServer()) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			fn(kind, sig)
		})
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("bus: subscribe signals: %w", err)
		}
		s.subs = append(s.subs, sub)
	}
	return s, nil
}

// PublishMetaChanged announces a new current generation of a table. The
// payload is meta without its tablets (name, generation, split points,
// sizes); subscribers read the full metadata from the MetaStore.
func (c *Conn) PublishMetaChanged(meta *messages.TableMeta) error {
	if meta.GetName() == "" {
		return fmt.Errorf("%w: meta changed needs a table name", ErrBadSignal)
	}
	slim := proto.CloneOf(meta)
	slim.Tablets = nil
	return c.publish(MetaChangedSubject, slim)
}

// SubscribeMetaChanged calls fn for every metadata change announcement.
func (c *Conn) SubscribeMetaChanged(fn func(*messages.TableMeta)) (*Subscription, error) {
	sub, err := subscribeDecoded(c, MetaChangedSubject, func(_ string, m *messages.TableMeta) { fn(m) })
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe meta changed: %w", err)
	}
	return &Subscription{subs: []*nats.Subscription{sub}}, nil
}

// subscribeDecoded subscribes to subject and calls fn with the subject
// and every payload that decodes as an M; one that does not is counted
// and logged (decodeFailed) and dropped. M is a pointer to a generated
// message.
func subscribeDecoded[T any, M interface {
	*T
	proto.Message
}](c *Conn, subject string, fn func(string, M)) (*nats.Subscription, error) {
	return c.nc.Subscribe(subject, func(msg *nats.Msg) {
		m := M(new(T))
		if err := proto.Unmarshal(msg.Data, m); err != nil {
			c.decodeFailed(msg, err)
			return
		}
		fn(msg.Subject, m)
	})
}

// signalSubjectOK applies CheckSignalSubject to a received signal; a
// mismatch is counted and logged, and the signal is to be dropped.
func (c *Conn) signalSubjectOK(subject, host, server string) bool {
	err := CheckSignalSubject(subject, host, server)
	if err == nil {
		return true
	}
	n := c.mismatched.Add(1)
	if !c.warnings.Allow() {
		return false
	}
	c.log.Warn("dropping a signal whose payload is not of its subject's host and server", "err", err, "mismatched_signals", n)
	return false
}
