package client

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
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

// tableMeta returns the current generation of a table's record: its
// tablets' files are filled in only where the record holds them inline
// (tabletMeta loads the others, one tablet at a time). The
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
		t, err = c.meta.Record(ctx, name, gen)
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

// fileListBytes bounds the tablets' file lists a client keeps once it
// loaded them from manifests (tablets.TabletFiles.MaxBytes).
const fileListBytes = 64 << 20

// tabletMeta returns tablet idx of record tm with its files: a tablet
// that keeps them in manifests has them loaded (only its own manifests,
// each checked against the record) or taken from the client's bounded
// cache of file lists. A manifest lookup that finds the store
// unavailable is tried again for up to metaRetryLimit, within ctx.
func (c *Client) tabletMeta(ctx context.Context, tm *messages.TableMeta, idx int) (*messages.TabletMeta, error) {
	c.mu.Lock()
	if c.files == nil {
		c.files = &tablets.TabletFiles{MaxBytes: fileListBytes, Get: c.manifest}
	}
	files := c.files
	c.mu.Unlock()
	t, err := files.Tablet(ctx, tm, idx)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return t, nil
}

// manifest fetches a manifest of table, again while the metadata store
// is unavailable.
func (c *Client) manifest(ctx context.Context, table string, id tablets.ManifestID) (data []byte, err error) {
	if c.meta == nil {
		return nil, ErrClosed
	}
	err = bus.RetryUnavailable(ctx, metaRetryLimit, func() (err error) {
		data, err = c.meta.GetManifest(ctx, table, id.Gen, id.Digest)
		return err
	})
	return data, err
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
