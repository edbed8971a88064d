package protocol

// ErrorCode is the "error" of an error body, {"error":code,"message":…}
// (SPEC §2). A route gate decision is relayed with Core's own code, which
// may be outside the constants below.
type ErrorCode string

// The error codes of SPEC §2's table.
const (
	CodeInvalidRequest   ErrorCode = "invalid_request"             // 400: malformed JSON, unknown field, bad type or range
	CodeReferenceInvalid ErrorCode = "knowledge_reference_invalid" // 400: ref or cursor malformed, forged or bound elsewhere
	CodeUnauthorized     ErrorCode = "unauthorized"                // 401: Core rejects the bearer
	CodeRouteNotAllowed  ErrorCode = "route_not_allowed"           // 403: route not granted (or Core's gate code)
	CodeRouteUnavailable ErrorCode = "route_unavailable"           // 404: route unknown, disabled or malformed
	CodeRunNotFound      ErrorCode = "run_not_found"               // 404: run_id not owned by this session, client and route
	CodeRunNotActive     ErrorCode = "run_not_active"              // 409: run not context_ready, or completed
	CodeScopeChanged     ErrorCode = "knowledge_scope_changed"     // 409: the route's knowledge configuration changed
	CodeKnowledgeChanged ErrorCode = "knowledge_changed"           // 409: the document changed or is no longer available
	CodeReferenceExpired ErrorCode = "knowledge_reference_expired" // 410: ref or cursor older than ReferenceTTL
	CodePayloadTooLarge  ErrorCode = "payload_too_large"           // 413: body over MaxRequestBytes
	CodeMethodNotAllowed ErrorCode = "method_not_allowed"          // 405: wrong method on a knowledge path
	CodeRateLimited      ErrorCode = "rate_limited"                // 429: per-session limit
	CodeUnavailable      ErrorCode = "knowledge_unavailable"       // 503: Core or the catalog cannot be reached
)

// Managed-task codes (SPEC §4a): Core's own, answered with Core's statuses
// and TaskMessage, so hosts that handle Core's task errors need nothing new.
const (
	CodeTaskRequired        ErrorCode = "TASK_REQUIRED"
	CodeTaskRecordInvalid   ErrorCode = "TASK_RECORD_INVALID"
	CodeTaskBindingConflict ErrorCode = "TASK_BINDING_CONFLICT"
	CodeTaskRunInactive     ErrorCode = "TASK_RUN_INACTIVE"
	CodeTaskMemberMismatch  ErrorCode = "TASK_MEMBER_MISMATCH"
	CodeTaskScopeBlocked    ErrorCode = "TASK_SCOPE_BLOCKED"
	CodeTaskPaused          ErrorCode = "TASK_PAUSED"
	CodeTaskCancelled       ErrorCode = "TASK_CANCELLED"
	CodeTaskExpired         ErrorCode = "TASK_EXPIRED"
	CodeTaskInvalidInput    ErrorCode = "TASK_INVALID_INPUT"
	CodeTaskUnavailable     ErrorCode = "TASK_UNAVAILABLE"
)

// TaskMessage is Core's message of every TASK_* answer.
const TaskMessage = "The governed task operation could not be accepted."
