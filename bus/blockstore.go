package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrNotFound is wrapped by every lookup of a key that does not exist.
var ErrNotFound = errors.New("bus: not found")

// ErrTooLarge is wrapped when a value is larger than the store accepts.
var ErrTooLarge = errors.New("bus: value too large")

// MaxBlockBytes is the largest value the block bucket accepts (its
// MaxValueSize when this package creates it). Blocks are ~64 KiB.
const MaxBlockBytes = 1 << 20

// payloadSlack leaves room for the subject and headers of a KV put within
// the connection's max payload.
const payloadSlack = 4 << 10

// BlockStore keeps tablet-file blocks and indexes in a JetStream KV bucket,
// one entry per key, in file storage. It satisfies tablets.BlockStore. Keys
// may be any non-empty string: characters a KV key cannot hold are escaped
// (see escapeKey), so "f/0001.idx" is stored as is. Safe for concurrent use.
type BlockStore struct {
	conn *Conn
	kv   jetstream.KeyValue
}

// BlockStore binds the blocks bucket, creating it if missing (file storage,
// history 1, MaxBlockBytes per value, Config.Replicas).
func (c *Conn) BlockStore(ctx context.Context) (*BlockStore, error) {
	kv, err := c.bucket(ctx, jetstream.KeyValueConfig{
		Bucket:       c.cfg.BlocksBucket,
		Description:  "scanplane tablet-file blocks",
		MaxValueSize: MaxBlockBytes,
		History:      1,
		Storage:      jetstream.FileStorage,
		Replicas:     c.cfg.Replicas,
	})
	if err != nil {
		return nil, err
	}
	return &BlockStore{conn: c, kv: kv}, nil
}

// bucket binds an existing KV bucket or creates it with cfg. An existing
// bucket is used as is, never reconfigured.
func (c *Conn) bucket(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := c.js.KeyValue(ctx, cfg.Bucket)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("bus: bind bucket %s: %w", cfg.Bucket, err)
	}
	kv, err = c.js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		// Another process created it between our lookup and create.
		kv, err = c.js.KeyValue(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: create bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// checkSize rejects a value the bucket or the connection would refuse.
func (c *Conn) checkSize(what string, n, limit int) error {
	if mp := int(c.nc.MaxPayload()) - payloadSlack; mp > 0 && mp < limit {
		limit = mp
	}
	if n > limit {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrTooLarge, what, n, limit)
	}
	return nil
}

// Put stores data under key, replacing any previous value.
func (b *BlockStore) Put(ctx context.Context, key string, data []byte) error {
	if key == "" {
		return errors.New("bus: block put: empty key")
	}
	if err := b.conn.checkSize("block "+key, len(data), MaxBlockBytes); err != nil {
		return err
	}
	if _, err := b.kv.Put(ctx, escapeKey(key, true), data); err != nil {
		return fmt.Errorf("bus: block put %s: %w", key, err)
	}
	return nil
}

// Get returns the value of key; a missing key gives an error wrapping
// ErrNotFound. The returned slice is the caller's.
func (b *BlockStore) Get(ctx context.Context, key string) ([]byte, error) {
	if key == "" {
		return nil, fmt.Errorf("bus: block get: empty key: %w", ErrNotFound)
	}
	e, err := b.kv.Get(ctx, escapeKey(key, true))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("bus: block %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: block get %s: %w", key, err)
	}
	return e.Value(), nil
}

// Delete removes key and its history (a KV purge: only a small marker
// remains). Deleting a missing key is not an error.
func (b *BlockStore) Delete(ctx context.Context, key string) error {
	if key == "" {
		return nil
	}
	if err := b.kv.Purge(ctx, escapeKey(key, true)); err != nil {
		return fmt.Errorf("bus: block delete %s: %w", key, err)
	}
	return nil
}
