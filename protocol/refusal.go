package protocol

import "encoding/json"

// Refusal is an error answer of the knowledge endpoints as it goes on the
// wire (SPEC §2): the HTTP status, the body {"error":Code,"message":Message}
// and, on a 429, the Retry-After header. The knowledge service's errors have
// this one wire form (knowledge.Error.Refusal): the edge writes it as an
// HTTP answer, the MCP tools render it as a tool error.
type Refusal struct {
	Status  int       `json:"-"`
	Code    ErrorCode `json:"error"`
	Message string    `json:"message"`
	// RetryAfter is the Retry-After header's value in whole seconds; 0:
	// no header.
	RetryAfter int `json:"-"`
}

// Body is the refusal's JSON body, {"error","message"}.
func (r Refusal) Body() []byte {
	b, _ := json.Marshal(r) // a string and a string: cannot fail
	return b
}
