package sim

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// requestOf returns the request id and attempt a message belongs to
// ("" for heartbeats and other messages of no scan).
func requestOf(m proto.Message) (string, uint32) {
	switch m := m.(type) {
	case *messages.ScanRequest:
		return m.GetRequestId(), 0
	case *messages.ScanDone:
		return m.GetRequestId(), m.GetWinnerAttempt()
	case *messages.ScanError:
		return m.GetRequestId(), 0
	case *messages.StartScan:
		return m.GetRequestId(), m.GetAttempt()
	case *messages.ScanStarted:
		return m.GetRequestId(), m.GetAttempt()
	case *messages.Busy:
		return m.GetRequestId(), m.GetAttempt()
	case *messages.RowBatch:
		return m.GetRequestId(), m.GetAttempt()
	case *messages.BatchAck:
		return m.GetRequestId(), m.GetAttempt()
	case *messages.ScanFinished:
		return m.GetRequestId(), m.GetAttempt()
	case *messages.Cancel:
		return m.GetRequestId(), m.GetAttempt()
	case *messages.LoadSignal:
		return m.GetRequestId(), 0
	case *messages.ScanProgress:
		return m.GetRequestId(), 0
	case *messages.ScanRouted:
		return m.GetRequestId(), 0
	}
	return "", 0
}

// describe is a one-line summary of a message for the trace.
func describe(m proto.Message) string {
	switch m := m.(type) {
	case *messages.ScanRequest:
		return fmt.Sprintf("ScanRequest{%s t%d after=%s avoid=%v timeout=%dms}", m.GetRequestId(), m.GetTablet().GetIndex(),
			tablets.FormatKey(m.GetResumeAfter()), m.GetAvoidServers(), m.GetTimeoutMs())
	case *messages.ScanDone:
		return fmt.Sprintf("ScanDone{%s winner=%d abandoned=%v}", m.GetRequestId(), m.GetWinnerAttempt(), m.GetAbandoned())
	case *messages.ScanError:
		return fmt.Sprintf("ScanError{%s %s: %s}", m.GetRequestId(), m.GetCode(), m.GetMessage())
	case *messages.StartScan:
		return fmt.Sprintf("StartScan{%s/%d %s busy=%dus}", m.GetRequestId(), m.GetAttempt(), m.GetServer(), m.GetBusyTimeoutUs())
	case *messages.ScanStarted:
		return fmt.Sprintf("ScanStarted{%s/%d %s firstData=%v}", m.GetRequestId(), m.GetAttempt(), m.GetServer(), m.GetFirstData())
	case *messages.Busy:
		return fmt.Sprintf("Busy{%s/%d %s}", m.GetRequestId(), m.GetAttempt(), m.GetServer())
	case *messages.RowBatch:
		first, last := "", ""
		rows, _ := tablets.BatchRows(m, 0) // undecodable: none (the client refuses such a batch)
		if n := len(rows); n > 0 {
			first, last = tablets.FormatKey(rows[0].Key), tablets.FormatKey(rows[n-1].Key)
		}
		return fmt.Sprintf("RowBatch{%s/%d seq=%d rows=%d [%s..%s] count=%d sum=%x}", m.GetRequestId(), m.GetAttempt(), m.GetSeq(),
			len(rows), first, last, m.GetRowCount(), m.GetChecksum())
	case *messages.BatchAck:
		return fmt.Sprintf("BatchAck{%s/%d seq=%d}", m.GetRequestId(), m.GetAttempt(), m.GetSeq())
	case *messages.ScanFinished:
		return fmt.Sprintf("ScanFinished{%s/%d %s %s rows=%d batches=%d sum=%x}", m.GetRequestId(), m.GetAttempt(), m.GetServer(),
			m.GetError(), m.GetRows(), m.GetBatches(), m.GetChecksum())
	case *messages.Cancel:
		return fmt.Sprintf("Cancel{%s/%d unlessStreaming=%v %q}", m.GetRequestId(), m.GetAttempt(), m.GetUnlessStreaming(), m.GetReason())
	case *messages.Heartbeat:
		return fmt.Sprintf("Heartbeat{%s inc=%s q=%d}", m.GetServer(), m.GetIncarnation(), m.GetQueueLen())
	case *messages.LoadSignal:
		return fmt.Sprintf("LoadSignal{%s %s}", m.GetServer(), m.GetRequestId())
	case *messages.ScanProgress:
		return fmt.Sprintf("ScanProgress{%s %s: %s}", m.GetRequestId(), m.GetCoordinator(), m.GetState())
	case *messages.ScanRouted:
		return fmt.Sprintf("ScanRouted{%s owner=%s actor=%s}", m.GetRequestId(), m.GetOwner(), m.GetTabletActor().GetId())
	}
	return fmt.Sprintf("%T", m)
}
