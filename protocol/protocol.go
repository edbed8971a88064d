package protocol

import "time"

// Name is the protocol's name, carried by the capabilities answer and the
// turn's delivery block, and part of the knowledge scope revision (SPEC §3).
const Name = "bailing.agent-knowledge.v1"

// The schema_version of each answer.
const (
	CapabilitiesSchema = "bailing.agent-knowledge-capabilities.v1" // GET …/knowledge/capabilities (SPEC §3)
	SearchSchema       = "bailing.agent-knowledge-search.v1"       // POST …/knowledge/search (SPEC §4)
	ReadSchema         = "bailing.agent-knowledge-read.v1"         // POST …/knowledge/read (SPEC §6)
	DeliverySchema     = "bailing.agent-knowledge-delivery.v1"     // a turn's knowledge_delivery block (SPEC §7)
)

// The limits of SPEC §3: fixed constants of the protocol, not configuration.
// The capabilities answer states the first six under these names.
const (
	SearchMaxResults    = 3      // search_max_results: hints per search (and per turn block)
	SearchMaxBytes      = 4096   // search_max_bytes: a whole search body on the wire
	ReadDefaultBytes    = 16384  // read_default_bytes: max_bytes when a read omits it
	ReadMaxBytes        = 32768  // read_max_bytes: the largest max_bytes a read accepts
	ReferenceTTLSeconds = 300    // reference_ttl_seconds: lifetime of refs and cursors
	ReadChainMaxBytes   = 131072 // read_chain_max_bytes: content bytes served across one ref's pages

	// ReadMinBytes is the smallest max_bytes a read accepts (SPEC §6).
	ReadMinBytes = 4096
	// MaxQueryUnits is the search query limit in UTF-16 code units,
	// JavaScript's String length as Core counts it: an emoji counts 2 (SPEC §4).
	MaxQueryUnits = 2000
	// MaxRequestBytes bounds every knowledge request body (SPEC §2: 16 KiB).
	MaxRequestBytes = 16 << 10
	// MaxTokenBytes bounds a reference or cursor string (SPEC §5).
	MaxTokenBytes = 512
)

// The remote MCP endpoint (SPEC §10): its body limit and its tool sets.
const (
	// MaxMCPBody bounds a remote MCP request body: 64 KiB, far above any
	// tool call's arguments (a query of 2000 UTF-16 units, a ref and a
	// cursor of 512 bytes each).
	MaxMCPBody = 64 << 10
	// MCPProfileKnowledge (the default) serves knowledge_search and
	// knowledge_read; MCPProfileOpenAI serves search and fetch, the pair
	// OpenAI's connectors and deep research require (?profile=).
	MCPProfileKnowledge = "knowledge"
	MCPProfileOpenAI    = "openai"
)

// ValidMCPProfile reports whether p names a profile ("" is the default).
func ValidMCPProfile(p string) bool {
	return p == "" || p == MCPProfileKnowledge || p == MCPProfileOpenAI
}

// ReferenceTTL is ReferenceTTLSeconds as a duration.
const ReferenceTTL = ReferenceTTLSeconds * time.Second

// Trust is the trust value of every search and read answer: reference
// material, never instructions.
const Trust = "reference_only"

// DeliveryMode is how a turn carries knowledge (SPEC §7): Core's bounded
// inline knowledge, or on demand through search and read.
type DeliveryMode string

// The two delivery modes; a turn request naming any other is refused.
const (
	DeliveryInline   DeliveryMode = "inline"
	DeliveryOnDemand DeliveryMode = "on_demand"
)

// Valid reports whether m is one of the two modes.
func (m DeliveryMode) Valid() bool { return m == DeliveryInline || m == DeliveryOnDemand }

// Knowledge statuses of a search answer and a delivery block (SPEC §4).
const (
	StatusOK          = "ok"          // every knowledge base answered
	StatusPartial     = "partial"     // some failed, are disabled or missing
	StatusUnavailable = "unavailable" // none answered
	StatusDisabled    = "disabled"    // the route has no knowledge configured
)

// MCP tool names (SPEC §10).
const (
	SearchTool = "knowledge_search"
	ReadTool   = "knowledge_read"
)
