package wire

import "time"

// MaxTimeout is the longest timeout a message may carry (timeout_ms):
// longer ones are refused as bad requests. A coordinator clamps what it
// accepts further, to its MaxFlowAge.
const MaxTimeout = 7 * 24 * time.Hour

// TimeoutMs is the timeout_ms field for the time left d: rounded up to
// the millisecond so that time left is never sent as none, and at least 1
// (a deadline that has passed is sent as 1 ms, which expires on receipt).
func TimeoutMs(d time.Duration) int64 {
	if d <= 0 {
		return 1
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Deadline is the local deadline of a message that carries timeout_ms ms
// and arrived at received: zero when it carries none (0), else received
// plus the timeout, at most received plus limit when limit > 0.
func Deadline(received time.Time, timeoutMs int64, limit time.Duration) time.Time {
	d := time.Duration(timeoutMs) * time.Millisecond
	if timeoutMs <= 0 {
		if limit <= 0 {
			return time.Time{}
		}
		d = limit
	}
	if limit > 0 && d > limit {
		d = limit
	}
	return received.Add(d)
}
