package coordinator

import (
	"time"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/scanflow"
	"github.com/scanplane/scanplane/selection"
)

// The flow of one scan request is the pure state machine of package
// scanflow (the policy simulator runs the same code); the tablet actor
// carries out its actions. These names keep the coordinator's spelling.
type (
	// FlowConfig tunes ScanFlow (scanflow.FlowConfig).
	FlowConfig = scanflow.FlowConfig
	// TimerKind names a ScanFlow timer.
	TimerKind = scanflow.TimerKind
	// ActionKind names what the actor must do.
	ActionKind = scanflow.ActionKind
	// Action is one effect ScanFlow asks its actor to carry out.
	Action = scanflow.Action
	// FlowAttempt is one dispatch of the flow's scan.
	FlowAttempt = scanflow.FlowAttempt
	// Picker asks the selection policy for the next server.
	Picker = scanflow.Picker
	// ScanFlow is the state machine of one ScanRequest in a tablet actor.
	ScanFlow = scanflow.ScanFlow
)

// Timer and action kinds (scanflow).
const (
	TimerDispatch = scanflow.TimerDispatch
	TimerBusy     = scanflow.TimerBusy
	TimerHedge    = scanflow.TimerHedge
	TimerData     = scanflow.TimerData
	TimerStall    = scanflow.TimerStall
	TimerRetry    = scanflow.TimerRetry
	TimerDeadline = scanflow.TimerDeadline

	ActDispatch      = scanflow.ActDispatch
	ActCancel        = scanflow.ActCancel
	ActAccount       = scanflow.ActAccount
	ActSlowdown      = scanflow.ActSlowdown
	ActLatency       = scanflow.ActLatency
	ActTimer         = scanflow.ActTimer
	ActFail          = scanflow.ActFail
	ActComplete      = scanflow.ActComplete
	ActTimeoutSignal = scanflow.ActTimeoutSignal
)

// DefaultFlowConfig returns the documented defaults (scanflow).
func DefaultFlowConfig() FlowConfig { return scanflow.DefaultFlowConfig() }

// NewScanFlow starts a flow (scanflow.NewScanFlow).
func NewScanFlow(req *messages.ScanRequest, deadline time.Time, cfg FlowConfig, waitForServers time.Duration, avoid []selection.Attempt) *ScanFlow {
	return scanflow.NewScanFlow(req, deadline, cfg, waitForServers, avoid)
}

// WireResult converts an attempt result to the wire enum.
func WireResult(r selection.AttemptResult) messages.AttemptResult { return scanflow.WireResult(r) }

// SelectionResult converts a wire attempt result (0 if unknown).
func SelectionResult(r messages.AttemptResult) selection.AttemptResult {
	return scanflow.SelectionResult(r)
}
