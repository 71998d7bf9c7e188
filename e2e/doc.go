// Package e2e holds scanplane's end-to-end tests: a cluster of real
// processes (coordinator with its embedded NATS, scanserver processes) on
// loopback, started exactly as `scanctl up` starts it, scanned through the
// client library and compared row by row with the ground truth, also while
// scan servers are stopped (SIGSTOP) and killed (SIGKILL). It has no
// non-test code.
package e2e
