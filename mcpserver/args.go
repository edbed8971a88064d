package mcpserver

// toolArgs are a tool's arguments, taken from the instance that passed the
// tool's input schema (which admits only the tool's own members, each of
// its type, strings non-empty and numbers whole and in range; so a zero
// value means the member is absent). The arguments are decoded once, for
// the schema; this copies their values, it does not decode them again.
type toolArgs struct {
	Query    string
	Limit    float64
	Ref      string
	Cursor   string
	Near     string
	MaxBytes float64
	RunID    string
	ID       string // fetch (openai profile)
}

// argsOf is the arguments of a decoded instance that passed the schema.
func argsOf(obj map[string]any) toolArgs {
	str := func(k string) string { s, _ := obj[k].(string); return s }
	num := func(k string) float64 { f, _ := obj[k].(float64); return f }
	return toolArgs{Query: str("query"), Limit: num("limit"), Ref: str("ref"), Cursor: str("cursor"), Near: str("near"),
		MaxBytes: num("max_bytes"), RunID: str("run_id"), ID: str("id")}
}

// protoRequest is a search or read request's body: the members the tool sends,
// absent when zero.
type protoRequest struct {
	Query    string `json:"query,omitempty"`
	Limit    int    `json:"limit,omitempty"`
	Ref      string `json:"ref,omitempty"`
	Cursor   string `json:"cursor,omitempty"`
	MaxBytes int    `json:"max_bytes,omitempty"`
	RunID    string `json:"run_id,omitempty"`
}

// request is the protocol request the arguments ask for (near and id are
// the tools' own).
func (a *toolArgs) request() protoRequest {
	return protoRequest{Query: a.Query, Limit: int(a.Limit), Ref: a.Ref, Cursor: a.Cursor, MaxBytes: int(a.MaxBytes), RunID: a.RunID}
}
