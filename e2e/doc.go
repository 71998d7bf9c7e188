// Package e2e holds scanplane's end-to-end tests: a cluster of real
// processes (coordinator with its embedded NATS, scanserver processes) on
// loopback, started exactly as `scanctl up` starts it, scanned through the
// client library and compared row by row with the ground truth, also while
// scan servers are stopped (SIGSTOP) and killed (SIGKILL). It has no
// non-test code.
//
// A failed test prints the last lines of every child's log. Environment:
// E2E_CHILD_LOG_LEVEL sets the children's log level (default warn);
// E2E_LOGS=DIR keeps the whole logs of a failed test in DIR/TESTNAME/.
package e2e
