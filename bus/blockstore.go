package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scanplane/scanplane/internal/backoff"
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
// (see escapeKey), so "f/0001.idx" is stored as is. Every operation is
// bounded by Config.OpTimeout, and every store failure wraps a sentinel
// (ErrNotFound, ErrCorrupt, ErrStoreFull, ErrUnavailable, ErrStorage). Safe
// for concurrent use.
type BlockStore struct {
	conn *Conn
	kv   jetstream.KeyValue
	// stream is the bucket's stream: Delete purges through it, and Get
	// asks it whether a key it cannot read is still indexed.
	stream jetstream.Stream
	// subjects is the prefix of the bucket's subjects, "$KV.<bucket>.".
	subjects string
	// async publishes PutAsync's messages: a JetStream context of its
	// own, so its pending-ack bound and ack timeout are PutAsync's.
	async jetstream.JetStream
	// replies takes the answers to GetMany's requests.
	replies replyMux
}

// BlockStore binds the blocks bucket, creating it if missing (file storage,
// history 1, MaxBlockBytes per value, Config.Replicas; see Conn.bucket).
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
	st, err := c.kvStream(ctx, c.cfg.BlocksBucket)
	if err != nil {
		return nil, err
	}
	async, err := jetstream.New(c.nc,
		jetstream.WithPublishAsyncMaxPending(maxAsyncPuts),
		jetstream.WithPublishAsyncTimeout(c.cfg.OpTimeout))
	if err != nil {
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	return &BlockStore{conn: c, kv: kv, stream: st, subjects: kvSubjectPrefix + c.cfg.BlocksBucket + ".", async: async}, nil
}

// maxAsyncPuts bounds the PutAsync calls awaiting JetStream's answer on
// one BlockStore; a PutAsync past it waits for a free place and fails
// if none frees up soon. Callers keep their own, smaller window.
const maxAsyncPuts = 4096

// kvSubjectPrefix and kvStreamPrefix are how JetStream names a KV
// bucket's subjects ("$KV.<bucket>.<key>") and stream ("KV_<bucket>").
const (
	kvSubjectPrefix = "$KV."
	kvStreamPrefix  = "KV_"
)

// kvStream binds the stream behind a KV bucket that was just opened.
// "Stream not found" is retried for up to kvStreamWait: right after a
// process (this one or another) created a replicated bucket, a JetStream
// node that has not yet applied the stream's assignment answers 404.
func (c *Conn) kvStream(ctx context.Context, bucket string) (jetstream.Stream, error) {
	var st jetstream.Stream
	err := backoff.New(kvStreamBackoff).Retry(ctx, kvStreamWait,
		func(err error) bool { return errors.Is(err, jetstream.ErrStreamNotFound) },
		func() (err error) {
			st, err = timed(c, ctx, func(octx context.Context) (jetstream.Stream, error) {
				return c.js.Stream(octx, kvStreamPrefix+bucket)
			})
			return err
		})
	if err != nil {
		return nil, c.storeErr(ctx, "bind stream of bucket "+bucket, err)
	}
	return st, nil
}

// kvStreamBackoff spaces kvStream's retries.
var kvStreamBackoff = backoff.Config{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: 0.2}

// kvStreamWait bounds kvStream's retries of "stream not found".
const kvStreamWait = 5 * time.Second

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

// Put stores data under key, replacing any previous value. A store
// without space left gives an error wrapping ErrStoreFull.
func (b *BlockStore) Put(ctx context.Context, key string, data []byte) error {
	if key == "" {
		return errors.New("bus: block put: empty key")
	}
	if err := b.conn.checkSize("block "+key, len(data), MaxBlockBytes); err != nil {
		return err
	}
	_, err := timed(b.conn, ctx, func(octx context.Context) (uint64, error) { return b.kv.Put(octx, escapeKey(key, true), data) })
	if err != nil {
		return b.conn.storeErr(ctx, "block put "+key, err)
	}
	return nil
}

// PutAsync sends data to be stored under key, as Put does, without
// waiting for JetStream's answer: wait blocks until JetStream
// acknowledged the value as stored (nil), refused it (an error wrapping
// a sentinel, as Put's), or Config.OpTimeout passed since the send
// (ErrUnavailable). wait does not return early when ctx ends, so once it
// returned the put is settled (a put that timed out may still be stored
// later; nothing else is left in flight). A value the store would
// refuse for its size, or a send that fails at once, is err and wait is
// nil. data must not be modified until wait returned. Safe for
// concurrent use; any goroutine may call wait, once.
func (b *BlockStore) PutAsync(ctx context.Context, key string, data []byte) (wait func() error, err error) {
	if key == "" {
		return nil, errors.New("bus: block put: empty key")
	}
	if err := b.conn.checkSize("block "+key, len(data), MaxBlockBytes); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bus: block put %s: %w", key, err)
	}
	f, err := b.async.PublishAsync(b.subjects+escapeKey(key, true), data)
	if err != nil {
		return nil, b.conn.storeErr(ctx, "block put "+key, err)
	}
	return func() error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			if errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
				err = fmt.Errorf("%w: no answer within %s", ErrUnavailable, b.conn.cfg.OpTimeout)
			}
			return b.conn.storeErr(context.Background(), "block put "+key, err)
		}
	}, nil
}

// Get returns the value of key; a missing key gives an error wrapping
// ErrNotFound, a key JetStream still indexes but cannot read (its stored
// message is damaged on disk) one wrapping ErrCorrupt. A key is missing
// only on the word of the stream's leader: a replica that did not find
// it may be behind, and without a leader Get cannot tell (ErrUnavailable).
// The returned slice is the caller's.
func (b *BlockStore) Get(ctx context.Context, key string) ([]byte, error) {
	if key == "" {
		return nil, fmt.Errorf("bus: block get: empty key: %w", ErrNotFound)
	}
	ek := escapeKey(key, true)
	e, err := timedRead(b.conn, ctx, func(octx context.Context) (jetstream.KeyValueEntry, error) { return b.kv.Get(octx, ek) })
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return b.missing(ctx, key, ek, false)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return b.fromLeader(ctx, key, ek)
	}
	if err != nil {
		return nil, b.conn.storeErr(ctx, "block get "+key, err)
	}
	return e.Value(), nil
}

// fromLeader reads key from the stream's leader after a direct get had
// no responders: no replica took it. A node that keeps the direct gets
// of the blocks on its own replica (natsserver.ServerConfig.LocalDirectGets)
// answers so while its replica catches up, or when it holds none. A key
// the leader cannot read either is explained by missing, which does not
// ask the leader again.
func (b *BlockStore) fromLeader(ctx context.Context, key, ek string) ([]byte, error) {
	data, _, deleted, err := b.conn.leaderGet(ctx, b.conn.cfg.BlocksBucket, b.subjects+ek)
	switch {
	case err == nil && deleted:
		return nil, fmt.Errorf("bus: block %s: %w", key, ErrNotFound) // a delete or purge marker
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return b.missing(ctx, key, ek, true)
	case err != nil:
		return nil, b.conn.storeErr(ctx, "block get "+key+" from the stream leader", err)
	}
	return data, nil
}

// missing explains a Get that found nothing: JetStream answers a read of
// a message that fails its checksum on disk with "not found" (it does so
// while running and after a restart alike, and logs nothing), but its
// subject index still counts the message. So a key the index counts is
// read again elsewhere before it is given up: from the stream's leader
// (a get that is not direct), then by direct gets, which the other
// replicas of a replicated bucket may answer (a direct get goes to a
// replica picked at random, unless the nodes keep direct gets on their
// own replica: then to the one on the client's server). Only when every read fails
// is it ErrCorrupt; a key the index does not count (never written,
// deleted, or gone with a damaged file block the server dropped on
// restart) is ErrNotFound. Direct gets no replica takes count as reads
// that failed. leaderRead: the leader was already asked and had no copy.
// Only the leader's stream info says whether the index counts a key:
// without a leader a replica answers it from what it has, which may be
// behind, so whether the key exists is unknown: ErrUnavailable (as a
// read from the leader is then, which JetStream answers 503).
func (b *BlockStore) missing(ctx context.Context, key, ek string, leaderRead bool) ([]byte, error) {
	notFound := fmt.Errorf("bus: block %s: %w", key, ErrNotFound)
	subj := b.subjects + ek
	counts, err := b.conn.subjectCounts(ctx, b.stream, b.conn.cfg.BlocksBucket, subj, "block get "+key)
	if err != nil {
		return nil, err
	}
	if counts[subj] == 0 {
		return nil, notFound
	}
	if !leaderRead {
		data, _, deleted, err := b.conn.leaderGet(ctx, b.conn.cfg.BlocksBucket, subj)
		switch {
		case err != nil && !errors.Is(err, jetstream.ErrMsgNotFound):
			return nil, b.conn.storeErr(ctx, "block get "+key+" from the stream leader", err)
		case err == nil && deleted:
			return nil, notFound // a delete or purge marker
		case err == nil:
			return data, nil
		}
	}
	for range corruptRereads {
		m, err := timed(b.conn, ctx, func(octx context.Context) (*jetstream.RawStreamMsg, error) {
			return b.stream.GetLastMsgForSubject(octx, subj)
		})
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound), errors.Is(err, nats.ErrNoResponders):
			continue // no replica took it, or this one cannot read it either
		case err != nil:
			return nil, b.conn.storeErr(ctx, "block get "+key, err)
		case m.Header.Get(kvOperationHeader) != "":
			return nil, notFound // a delete or purge marker
		}
		return m.Data, nil // another replica, or written again since
	}
	return nil, fmt.Errorf("bus: block %s: %w: stream %s indexes it but cannot read it (damaged on disk; read from the leader and %d more times)",
		key, ErrCorrupt, kvStreamPrefix+b.conn.cfg.BlocksBucket, corruptRereads)
}

// corruptRereads is how many direct gets missing tries after the
// leader's copy could not be read either.
const corruptRereads = 3

// leaderGet reads the last message of subj in bucket's stream from the
// stream's leader (JetStream's STREAM.MSG.GET API; the jetstream package
// gets directly from any replica when the stream allows it, and a
// replica that is behind, or just back from a pause, answers from what
// it has). deleted reports a delete or purge marker; a message the
// leader does not have is jetstream.ErrMsgNotFound.
func (c *Conn) leaderGet(ctx context.Context, bucket, subj string) (data []byte, seq uint64, deleted bool, err error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": subj})
	if err != nil {
		return nil, 0, false, err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error,omitempty"`
		Message *struct {
			Sequence uint64 `json:"seq"`
			Header   []byte `json:"hdrs,omitempty"`
			Data     []byte `json:"data,omitempty"`
		} `json:"message,omitempty"`
	}
	api := "$JS.API.STREAM.MSG.GET." + kvStreamPrefix + bucket
	msg, err := timed(c, ctx, func(octx context.Context) (*nats.Msg, error) { return c.nc.RequestWithContext(octx, api, req) })
	if err != nil {
		return nil, 0, false, err
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, 0, false, fmt.Errorf("%s: bad answer: %w", api, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, 0, false, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, 0, false, resp.Error
	case resp.Message == nil:
		return nil, 0, false, fmt.Errorf("%s: answer without a message", api)
	}
	m := resp.Message
	return m.Data, m.Sequence, bytes.Contains(m.Header, []byte(kvOperationHeader)), nil
}

// kvOperationHeader marks a KV delete or purge marker message.
const kvOperationHeader = "KV-Operation"

// Delete removes key and its history. It purges the key's subject from
// the bucket's stream, which removes the messages without writing a
// marker, so it works on a store that is full (a KV delete or purge would
// have to write one and be refused). Deleting a missing key is not an
// error.
func (b *BlockStore) Delete(ctx context.Context, key string) error {
	if key == "" {
		return nil
	}
	if err := purgeSubject(b.conn, ctx, b.stream, b.subjects+escapeKey(key, true)); err != nil {
		return b.conn.storeErr(ctx, "block delete "+key, err)
	}
	return nil
}

// purgeSubject removes every message of subj from st under OpTimeout.
func purgeSubject(c *Conn, ctx context.Context, st jetstream.Stream, subj string) error {
	_, err := timed(c, ctx, func(octx context.Context) (struct{}, error) {
		return struct{}{}, st.Purge(octx, jetstream.WithPurgeSubject(subj))
	})
	return err
}

// TableKeys lists the keys of table's objects: the keys that begin with
// the table's name and a dot (tablets.TableKeyLister; table is a valid
// table name, [A-Za-z0-9_-]). Deleted keys are not listed.
//
// The listing is a watcher, whose consumer JetStream places on one
// replica of the bucket: it lists what that replica holds, which may
// miss keys put a moment before on a replica still behind (a sweep
// that deletes what it lists leaves those for its next run), and a
// replica whose node is paused or cut off delivers nothing; the
// listing's tries and their bounds are listEntries'.
func (b *BlockStore) TableKeys(ctx context.Context, table string) ([]string, error) {
	entries, err := b.conn.listEntries(ctx, b.kv, "list blocks of "+table, true, escapeKey(table, false)+".>")
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(entries))
	for _, e := range entries {
		if key, ok := unescapeKey(e.Key()); ok {
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// refusedForNow reports whether JetStream refused a watcher for the
// moment (503: its system or the stream electing a leader), as it may
// refuse to open a bucket (transientBucketErr): the jetstream package's
// APIError, or nats.go's own one, which a key watcher's push consumer
// returns (classify). A try that already took its bound (ErrUnavailable)
// is not a refusal.
func refusedForNow(err error) bool {
	return transientBucketErr(err, true) && !errors.Is(err, ErrUnavailable)
}

// minRefusedWait is the shortest wait before a watcher JetStream refused
// is asked for again.
const minRefusedWait = 100 * time.Millisecond

// errListSilent: a listing's watcher was made or delivered nothing
// within its try's bound.
var errListSilent = errors.New("bus: the key watcher delivered nothing")

// MaxGetMany is the most keys one GetMany reads.
const MaxGetMany = 64

// GetMany reads the values of keys with one request to JetStream (a
// batched direct get of the keys' last messages: one round trip for all
// of them) and returns those it read, by key. A key absent from the
// result was not read: never stored, deleted, not yet on the replica
// that answered, or unreadable there; Get reads it alone and says which
// (GetMany is for reading ahead, where a key not read is read later).
// An error means nothing usable came back. Like Get, it is bounded by
// Config.OpTimeout and sent again after Config.ReadTry without an
// answer. At most MaxGetMany keys; duplicates are read once. The
// returned slices are the caller's.
func (b *BlockStore) GetMany(ctx context.Context, keys []string) (map[string][]byte, error) {
	if len(keys) > MaxGetMany {
		return nil, fmt.Errorf("bus: block get of %d keys: at most %d", len(keys), MaxGetMany)
	}
	bySubj := make(map[string]string, len(keys))
	subjs := make([]string, 0, len(keys))
	for _, k := range keys {
		if k == "" {
			return nil, errors.New("bus: block get: empty key")
		}
		s := b.subjects + escapeKey(k, true)
		if _, dup := bySubj[s]; !dup {
			bySubj[s] = k
			subjs = append(subjs, s)
		}
	}
	if len(subjs) == 0 {
		return map[string][]byte{}, nil
	}
	got, err := timedRead(b.conn, ctx, func(octx context.Context) (map[string][]byte, error) {
		return b.directGetLast(octx, kvStreamPrefix+b.conn.cfg.BlocksBucket, subjs, bySubj)
	})
	if err != nil {
		return nil, b.conn.storeErr(ctx, fmt.Sprintf("block get of %d keys", len(subjs)), err)
	}
	return got, nil
}

// statusHeader and descriptionHeader carry a NATS status message's code
// and text (nats.go parses the status line into them).
const (
	statusHeader      = "Status"
	descriptionHeader = "Description"
)

// directGetLast asks stream's replicas for the last message of each of
// subjs (JetStream's batched direct get, "multi_last"), and returns the
// data of those answered that are not delete or purge markers, under
// names[subject]. It reads the answers until the end-of-batch status.
func (b *BlockStore) directGetLast(ctx context.Context, stream string, subjs []string, names map[string]string) (map[string][]byte, error) {
	req, err := json.Marshal(struct {
		MultiLast []string `json:"multi_last"`
		Batch     int      `json:"batch"`
	}{subjs, len(subjs)})
	if err != nil {
		return nil, err
	}
	// Every answer and the end fit: none is dropped.
	inbox, answers, done, err := b.replies.open(b.conn.nc, len(subjs)+1)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := b.conn.nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, req); err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(subjs))
	for {
		var m *nats.Msg
		select {
		case m = <-answers:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		switch st := m.Header.Get(statusHeader); st {
		case "":
		case "204": // end of the batch
			return out, nil
		case "404": // none of the keys
			return out, nil
		case "503":
			return nil, nats.ErrNoResponders
		default:
			return nil, fmt.Errorf("direct get of %d subjects: status %s %s", len(subjs), st, m.Header.Get(descriptionHeader))
		}
		if m.Header.Get(kvOperationHeader) != "" {
			continue // a delete or purge marker
		}
		if k, ok := names[m.Header.Get(jetstream.SubjectHeader)]; ok {
			out[k] = m.Data
		}
	}
}

// replyMux takes the answers to many requests on one subscription to a
// wildcard inbox, as nats.go's requests do: a subscription per request
// would be a SUB and an UNSUB each, sent to every server of the
// cluster. Safe for concurrent use.
type replyMux struct {
	mu      sync.Mutex
	prefix  string // the inbox; a request's replies go to prefix.<n>
	sub     *nats.Subscription
	next    uint64
	waiting map[string]chan *nats.Msg
}

// open returns a reply subject of its own and the channel its answers
// arrive on (room for room answers; more are dropped), and done, which
// must be called when no more answers are wanted.
func (r *replyMux) open(nc *nats.Conn, room int) (subject string, answers <-chan *nats.Msg, done func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub == nil || !r.sub.IsValid() {
		prefix := nc.NewInbox()
		sub, err := nc.Subscribe(prefix+".*", r.deliver)
		if err != nil {
			return "", nil, nil, err
		}
		r.prefix, r.sub, r.waiting = prefix, sub, map[string]chan *nats.Msg{}
	}
	r.next++
	subject = r.prefix + "." + strconv.FormatUint(r.next, 36)
	ch := make(chan *nats.Msg, room)
	r.waiting[subject] = ch
	waiting := r.waiting
	return subject, ch, func() {
		r.mu.Lock()
		delete(waiting, subject)
		r.mu.Unlock()
	}, nil
}

// deliver hands an answer to its request's channel, or drops it (a late
// answer to a request that ended, or one beyond its room).
func (r *replyMux) deliver(m *nats.Msg) {
	r.mu.Lock()
	ch := r.waiting[m.Subject]
	r.mu.Unlock()
	if ch != nil {
		select {
		case ch <- m:
		default:
		}
	}
}
