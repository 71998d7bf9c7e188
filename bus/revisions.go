package bus

// revisions keeps, per key of a watched bucket, the highest revision a
// watch has applied, so that an entry of a lower revision is refused. A
// revision is the entry's stream sequence, which JetStream assigns and a
// reader cannot forge; an older entry delivered again — a consumer that
// another holder of the same certificate points at this watch's deliver
// subject, replaying the bucket from an old sequence — is a replay, not
// news. A rollback by the admin is a new write of the older value, with a
// higher revision, and passes. The same revision again (a watcher set up
// anew delivers the current entries) passes too. Not safe for concurrent
// use: each watch loop has its own.
type revisions map[string]uint64

// fresh reports whether rev is at least the highest revision applied for
// key, and records it.
func (r revisions) fresh(key string, rev uint64) bool {
	if rev < r[key] {
		return false
	}
	r[key] = rev
	return true
}
