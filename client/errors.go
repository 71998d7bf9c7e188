package client

import (
	"errors"
	"fmt"

	"github.com/scanplane/scanplane/messages"
)

var (
	// ErrScan: the cluster answered a scan with an error (see *ScanError).
	ErrScan = errors.New("client: scan failed")
	// ErrNoCoordinator: no coordinator could be found or reached.
	ErrNoCoordinator = errors.New("client: no coordinator")
	// ErrNoTable: the table does not exist.
	ErrNoTable = errors.New("client: no such table")
	// ErrClosed: the client is closed.
	ErrClosed = errors.New("client: closed")
	// ErrStream: the row stream broke in a way resuming could not mend.
	ErrStream = errors.New("client: row stream broken")
)

// ScanError is an error answered by the coordinator or a scan server.
type ScanError struct {
	Code     messages.ErrorCode
	Message  string
	Attempts []*messages.AttemptInfo
}

func (e *ScanError) Error() string {
	return fmt.Sprintf("client: scan failed: %s: %s", e.Code, e.Message)
}

// Is makes errors.Is(err, ErrScan) true.
func (e *ScanError) Is(target error) bool { return target == ErrScan }
