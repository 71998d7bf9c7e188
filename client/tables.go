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

// TableInfo describes one generation of a table.
type TableInfo struct {
	Name       string
	Generation uint64    // the generation, from 1; a new ingest makes the next
	Rows       uint64    // rows of the generation
	Bytes      uint64    // bytes of its rows' keys and values
	Tablets    int       // tablets the rows are split into
	Created    time.Time // when the generation was ingested
}

// Table returns the current generation of a table. The generation comes
// from a watch on the metadata bucket; a table the watch has not reported
// is looked up directly, tried again for up to 30s while the metadata
// store is unavailable (a leader election), within ctx. An unknown table
// is an error wrapping ErrNoTable.
func (c *Client) Table(ctx context.Context, name string) (TableInfo, error) {
	tm, err := c.tableMeta(ctx, name)
	if err != nil {
		return TableInfo{}, err
	}
	return TableInfo{Name: tm.GetName(), Generation: tm.GetGeneration(), Rows: tm.GetRows(), Bytes: tm.GetBytes(),
		Tablets: len(tm.GetTablets()), Created: time.UnixMilli(tm.GetCreatedUnixMs())}, nil
}

// tableMeta returns the current generation of a table's metadata. The
// generation comes from a watch on the metadata bucket; a table the watch
// has not reported is looked up directly. A lookup that finds the store
// unavailable (JetStream electing a leader) is tried again for up to
// metaRetryLimit, within ctx.
func (c *Client) tableMeta(ctx context.Context, name string) (*messages.TableMeta, error) {
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

// metaRetryLimit bounds how long tableMeta tries a metadata store that does
// not answer: longer than a JetStream leader election after a node died.
const metaRetryLimit = 30 * time.Second

// Tables lists the tables.
func (c *Client) Tables(ctx context.Context) ([]string, error) {
	if c.meta == nil {
		return nil, ErrClosed
	}
	return c.meta.Tables(ctx)
}
