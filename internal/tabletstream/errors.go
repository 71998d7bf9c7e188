package tabletstream

import (
	"errors"
	"fmt"

	"github.com/scanplane/scanplane/messages"
)

// Errors a TabletStream fails with (ActFail), besides *ScanError and
// context.DeadlineExceeded. The client maps them to its own sentinels; the
// texts are the ones its users see.
var (
	// ErrNoCoordinator: no coordinator was up for CoordinatorWait, or
	// none answered before the deadline.
	ErrNoCoordinator = errors.New("client: no coordinator")
	// ErrStream: a batch broke the protocol in a way resuming cannot mend.
	ErrStream = errors.New("client: row stream broken")
	// ErrNoDigests: a file of the tablet has no block roots (Roots).
	ErrNoDigests = errors.New("no block roots")
)

// ScanError is an error the coordinator answered for the stream's
// request, or the resume limit the stream reached.
type ScanError struct {
	Code     messages.ErrorCode
	Message  string
	Attempts []*messages.AttemptInfo
}

func (e *ScanError) Error() string {
	return fmt.Sprintf("client: scan failed: %s: %s", e.Code, e.Message)
}
