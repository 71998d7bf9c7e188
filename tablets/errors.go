package tablets

import "errors"

// Sentinel errors. Every error of this package wraps one of these (or a
// context / OS error) with %w; check with errors.Is.
var (
	// ErrBadRange: a range whose start is greater than its end.
	ErrBadRange = errors.New("tablets: bad range")
	// ErrBadKey: a key that is empty or badly escaped (ParseKey).
	ErrBadKey = errors.New("tablets: bad key")
	// ErrCorrupt: a block or index failed its length, checksum, count,
	// order or footer checks, or metadata failed to decode.
	ErrCorrupt = errors.New("tablets: corrupt data")
	// ErrNotFound: a missing block-store object or metadata generation.
	ErrNotFound = errors.New("tablets: not found")
	// ErrUnsorted: FileWriter.Add with a key not greater than the previous.
	ErrUnsorted = errors.New("tablets: keys not strictly increasing")
	// ErrBadInput: bad rows (empty key, too long key or value, duplicate
	// key, malformed TSV line, empty file) or bad configuration.
	ErrBadInput = errors.New("tablets: bad input")
	// ErrBadName: a bad table name or block-store object key.
	ErrBadName = errors.New("tablets: bad name")
	// ErrConflict: a metadata compare-and-swap lost (another writer
	// published first), or an operation on the current generation that is
	// not allowed.
	ErrConflict = errors.New("tablets: conflict")
	// ErrBadSplits: split points that are empty or not strictly increasing.
	ErrBadSplits = errors.New("tablets: bad split points")
	// ErrCleanup: Ingest published the new generation (its result is
	// valid) but deleting old generations failed; the next ingest retries.
	ErrCleanup = errors.New("tablets: cleanup of old generations failed")
	// ErrFormat: a table record in a metadata format newer than this
	// build reads (TableMeta.meta_format).
	ErrFormat = errors.New("tablets: unsupported metadata format")
)
