package tablets

// Limits on entries; a larger key or value is rejected with ErrBadInput.
// With the default block size a block stays far below NATS's default
// 1 MiB payload limit even when it holds one maximal entry.
const (
	MaxKeyLen   = 16 << 10  // bytes per key
	MaxValueLen = 256 << 10 // bytes per value
)
