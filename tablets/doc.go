// Package tablets owns scanplane's data layer: row keys and key ranges,
// tables split into tablets, splitting a scan range over tablets, the
// immutable tablet file format, the BlockStore interface with a
// local-directory backend, the MetaStore interface with a local-directory
// backend, the tablet reader (a k-way merge over a tablet's files) and
// ingest.
//
// # Keys and ranges
//
// Keys are non-empty byte strings compared with bytes.Compare. A Range is
// [Start, End); a nil or empty bound is open. A table with split points
// s0 < s1 < ... < s(n-1) has n+1 tablets; tablet i covers
// [s(i-1), s(i)), the first and last tablets being open on the outside. A
// key equal to a split point belongs to the tablet that starts at it.
//
// # Generations
//
// A table is a sequence of generations. Ingest writes every block and index
// of the new generation to the BlockStore first (and the file lists that
// do not stay in the record as manifests, manifest.go), then publishes
// its TableMeta with a compare-and-swap on the current generation. Re-ingesting
// a table therefore replaces it atomically: readers see either the old or
// the new generation, never a mix. The previous generation stays readable
// until the next ingest (with the default KeepGenerations = 2); publishing
// generation N deletes every older generation but the one it replaced
// (N-1, or the one Rollback made current), metadata first and then
// blocks. File
// ids carry a random per-ingest nonce, so two ingests racing for the same
// generation never write to the same objects, and a file id is never
// reused for different content (block caches key on it).
//
// # Files
//
// A tablet holds an ordered list of immutable files (later files win on
// equal keys). The file format (blocks, index, footer, checksums) is
// described at the top of format.go. A file always has at least one entry;
// a tablet without rows has no files. Ingest cuts a tablet into files of
// at most 4 MiB of keys and values (and fewer when an index would pass
// MaxIndexBytes), so every object stays well under NATS's payload limit
// and a file being encoded or written stays small in memory. It keeps
// IngestConfig.Writers Puts in flight (sent from the encoding goroutine
// without waiting when the store is an AsyncPutter), each file's index
// put once its blocks are stored.
//
// # Reading
//
// A reader verifies a block once (VerifyBlock: checksum, counts, order,
// first and last keys) and keeps it as a Block with in-memory seek points
// every RestartInterval entries, so a scan seeks to its start key with a
// binary search and a short walk instead of decoding the whole block.
// Through a DecodingFetcher (the host cache) verified Blocks and decoded
// FileIndexes are cached per host: a cache hit costs neither a checksum
// nor a decode, and an object that fails verification never enters the
// cache. A cached Block is checked against the index handle at hand
// (Block.Matches) before use.
//
// # Concurrency contract
//
// DirStore, DirMetaStore, StoreFetcher and TabletReader are safe for
// concurrent use by many goroutines (DirMetaStore also across processes on
// one machine: its compare-and-swap holds an flock on a lock file), and so
// is a Block. A
// FileWriter and an Iterator belong to one goroutine. Range, FileIndex and
// the slices returned by the decoders are treated as immutable once built.
// Nothing in this package reads the clock or global randomness: ingest takes
// both from IngestConfig (Now, Rand).
//
// # Errors
//
// Errors are the sentinels below (message prefix "tablets: "), wrapped with
// %w and checked with errors.Is. ErrCorrupt means a block or index failed
// its checks; a decoder never returns wrong rows for corrupt input and never
// panics.
package tablets
