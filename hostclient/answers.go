package hostclient

// The protocol's answers as a host decodes them (docs/protocol.md): the
// conformance checker reads a read page into ReadAnswer, the tests read all
// three. The implementation writes its answers with its own encoder; these
// types are the reader's side, so a test decoding into them strictly checks
// the wire shape independently of how it was written.

// SearchAnswer is the body of a 200 search (schema
// bailing.agent-knowledge-search.v1).
type SearchAnswer struct {
	SchemaVersion string  `json:"schema_version"`
	Route         string  `json:"route"`
	RunID         *string `json:"run_id"`
	ScopeRevision string  `json:"knowledge_scope_revision"`
	Trust         string  `json:"trust"`
	Status        string  `json:"status"`
	Hints         []Hint  `json:"hints"`
	Truncated     bool    `json:"truncated"`
}

// Hint is one search hint, also the element of a turn's same-run hints.
type Hint struct {
	Ref       string  `json:"ref"`
	Title     string  `json:"title"`
	Summary   string  `json:"summary"`
	Revision  string  `json:"revision"`
	Score     float64 `json:"score"`
	ExpiresAt string  `json:"expires_at"`
}

// ReadAnswer is the body of a 200 read: one page of a document (schema
// bailing.agent-knowledge-read.v1).
type ReadAnswer struct {
	SchemaVersion     string  `json:"schema_version"`
	Route             string  `json:"route"`
	RunID             *string `json:"run_id"`
	ScopeRevision     string  `json:"knowledge_scope_revision"`
	Ref               string  `json:"ref"`
	Revision          string  `json:"revision"`
	Title             string  `json:"title"`
	Content           string  `json:"content"`
	Trust             string  `json:"trust"`
	NextCursor        *string `json:"next_cursor"`
	Truncated         bool    `json:"truncated"`
	BudgetExhausted   bool    `json:"budget_exhausted"`
	TotalContentBytes int64   `json:"total_content_bytes"`
	ReadChainMaxBytes int64   `json:"read_chain_max_bytes"`
}
