package client

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/messages"
)

func (c *Client) onTableChange(table string, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen == 0 {
		delete(c.current, table)
		return
	}
	c.current[table] = gen
	// Generations older than the previous one are gone from the cluster.
	for k, t := range c.tables {
		if t.GetName() == table && t.GetGeneration()+1 < gen {
			delete(c.tables, k)
		}
	}
}

// Table returns the current generation of a table's metadata. The
// generation comes from a watch on the metadata bucket; a table the watch
// has not reported is looked up directly. A lookup that finds the store
// unavailable (JetStream electing a leader) is tried again for up to
// metaRetryLimit, within ctx.
func (c *Client) Table(ctx context.Context, name string) (*messages.TableMeta, error) {
	if c.meta == nil {
		return nil, ErrClosed
	}
	c.mu.Lock()
	gen := c.current[name]
	c.mu.Unlock()
	if gen == 0 {
		err := bus.RetryUnavailable(ctx, metaRetryLimit, func() (err error) {
			gen, err = c.meta.Current(ctx, name)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("client: table %q: %w", name, err)
		}
	}
	if gen == 0 {
		return nil, fmt.Errorf("%w: %q", ErrNoTable, name)
	}
	key := name + "/" + strconv.FormatUint(gen, 10)
	c.mu.Lock()
	t := c.tables[key]
	c.mu.Unlock()
	if t != nil {
		return t, nil
	}
	err := bus.RetryUnavailable(ctx, metaRetryLimit, func() (err error) {
		t, err = c.meta.Get(ctx, name, gen)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("client: table %q generation %d: %w", name, gen, err)
	}
	c.mu.Lock()
	c.tables[key] = t
	c.mu.Unlock()
	return t, nil
}

// metaRetryLimit bounds how long Table tries a metadata store that does
// not answer: longer than a JetStream leader election after a node died.
const metaRetryLimit = 30 * time.Second

// Tables lists the tables.
func (c *Client) Tables(ctx context.Context) ([]string, error) {
	if c.meta == nil {
		return nil, ErrClosed
	}
	return c.meta.Tables(ctx)
}
