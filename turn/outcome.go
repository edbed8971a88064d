package turn

import (
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// Outcome is how an intercepted turn ended: the turns_total{outcome} label
// the edge counts it under (Turn.Done, Recorder.Turn). A closed set:
// MetricLabels.Outcomes.
type Outcome string

const (
	Passed               Outcome = "passed"    // Core's answer relayed untouched
	Rewritten            Outcome = "rewritten" // Core's 2xx answer with the delivery block
	Rejected             Outcome = "rejected"  // an answer the sidecar made itself
	Conflict             Outcome = "conflict"  // 409 turn_conflict
	KnowledgeUnavailable Outcome = "knowledge_unavailable"
	LedgerUnavailable    Outcome = "ledger_unavailable"
	RateLimited          Outcome = "rate_limited"
	DeliveryFailed       Outcome = "delivery_failed" // 502: Core's answer could not be rewritten
	UpstreamError        Outcome = "upstream_error"  // Core gave no answer
)

// CoreOutcome is the outcome of a Core answer with status relayed as is.
func CoreOutcome(status int) Outcome {
	switch status / 100 {
	case 1:
		return "core_1xx"
	case 2:
		return "core_2xx"
	case 3:
		return "core_3xx"
	case 4:
		return "core_4xx"
	default:
		return "core_5xx"
	}
}

// Mode labels of a turn (turns_total{mode}) besides the delivery modes.
const (
	LabelAbsent  = "absent"  // no knowledge_delivery field
	LabelInvalid = "invalid" // a field with a value that is no mode
	LabelUnknown = "unknown" // decided before the field could be told
)

// Reasons and outcomes the turn side reports to its Recorder (the label
// values of the edge's ledger and hints series).
const (
	// FailOpenIdentity, FailOpenLedger: a field-less turn forwarded unbound
	// because identity, or the ledger, could not be had.
	FailOpenIdentity = "identity"
	FailOpenLedger   = "ledger"
	// ReleaseRefused: Core refused the attempt (4xx). ReleaseNotSent: Core
	// never received it (the client left, or Core could not be reached,
	// before the request was written).
	ReleaseRefused = "refused"
	ReleaseNotSent = "not_sent"
	// HintsOff: same-run hints are turned off (turn_hints: false); the
	// other hints outcomes are knowledge's (HintsMinted, HintsNone,
	// HintsFailed).
	HintsOff = "off"
)

// MetricLabels are the closed label sets of what the Recorder is told, for
// the edge to create every series up front: Turn's modes and outcomes,
// FailOpen's reasons, Released's reasons, Hints's outcomes.
var MetricLabels = struct {
	Modes, Outcomes, FailOpen, Releases, Hints []string
}{
	Modes: []string{LabelAbsent, LabelInvalid, LabelUnknown, string(protocol.DeliveryInline), string(protocol.DeliveryOnDemand)},
	Outcomes: []string{string(Passed), string(Rewritten), string(Rejected), string(Conflict), string(KnowledgeUnavailable),
		string(LedgerUnavailable), string(RateLimited), string(DeliveryFailed), string(UpstreamError),
		string(CoreOutcome(100)), string(CoreOutcome(200)), string(CoreOutcome(300)), string(CoreOutcome(400)), string(CoreOutcome(500))},
	FailOpen: []string{FailOpenIdentity, FailOpenLedger},
	Releases: []string{ReleaseRefused, ReleaseNotSent},
	Hints:    []string{knowledge.HintsMinted, knowledge.HintsNone, knowledge.HintsFailed, HintsOff},
}
