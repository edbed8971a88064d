package corefacts

// TurnBodyMax is Core's limit on a turn's raw body, 512 KiB
// (AGENT_RUNTIME_JSON_BODY_MAX_BYTES; CORE_FACTS §3.2). Core answers a larger
// body 413 arguments_too_large, so the sidecar never reads past it: such a
// turn is passed through untouched for Core to refuse.
const TurnBodyMax = 512 << 10
