package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
)

// WatchClusterInfo calls fn with the cluster info the coordinator stored
// (see PutClusterInfo) and then with every change, until ctx ends or the
// connection closes; fn(nil) means the entry was deleted. A changed
// incarnation means the coordinator restarted. fn is called from one
// goroutine, one call at a time; undecodable entries are skipped (and
// counted in DecodeErrors). WatchClusterInfo returns once the watcher is
// set up, without waiting for the first value.
func (m *MetaStore) WatchClusterInfo(ctx context.Context, fn func(ci *messages.ClusterInfo)) error {
	w, err := m.kv.Watch(ctx, clusterCoordKey)
	if err != nil {
		return fmt.Errorf("bus: watch cluster info: %w", err)
	}
	go func() {
		defer func() {
			// Stop, then drain so a delivery blocked on the full channel
			// returns and the library closes the channel.
			_ = w.Stop()
			for range w.Updates() {
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue // end of the initial values
				}
				if e.Operation() != jetstream.KeyValuePut {
					fn(nil)
					continue
				}
				ci := new(messages.ClusterInfo)
				if err := proto.Unmarshal(e.Value(), ci); err != nil {
					m.conn.decodeErrors.Add(1)
					m.conn.log.Warn("ignoring undecodable cluster info", "err", err)
					continue
				}
				fn(ci)
			}
		}
	}()
	return nil
}
