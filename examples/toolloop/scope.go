package toolloop

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
)

// Scope is what knowledge a host caches belongs to: hints and refs are
// valid only for the turn, the account, the authorization, the workspace
// and the capabilities declaration they were obtained under (the seed's
// five triggers). A change of any of the five drops them.
type Scope struct {
	Turn          string // the current turn (its run_id, or the host's own turn id)
	Account       string // the signed-in account the host acts for
	Authorization string // AuthorizationDigest of the bearer token, never the token itself
	Route         string // the workspace (route key)
	// Declaration is DeclarationDigest of the last capabilities answer: it
	// changes when the Core behind the route is upgraded to a native
	// version or rolled back, or the knowledge configuration changes.
	Declaration string
}

// declarationFields are the capabilities fields that declare what a host
// may rely on.
var declarationFields = []string{"schema_version", "protocol", "supported", "route", "enabled",
	"knowledge_scope_revision", "delivery_modes", "limits"}

// DeclarationDigest is what a Scope keeps of a capabilities answer: a
// digest of its declared fields in a canonical encoding (key order and
// other fields do not matter). A body that is no JSON object has the digest
// of an empty declaration.
func DeclarationDigest(capabilities []byte) string {
	var all map[string]any
	_ = json.Unmarshal(capabilities, &all)
	decl := make(map[string]any, len(declarationFields))
	for _, k := range declarationFields {
		decl[k] = all[k]
	}
	canon, _ := json.Marshal(decl) // maps encode with sorted keys
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:8])
}

// AuthorizationDigest is what a Scope keeps of a bearer token: a refresh
// (a new token) is a change of authorization, and the token itself is not
// kept beside cached knowledge.
func AuthorizationDigest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// Hint is what the host keeps of a search or same-run hint.
type Hint struct {
	Ref   string `json:"ref"`
	Title string `json:"title"`
}

// Cache holds the hints (and so the refs) a host obtained in its current
// scope. It is safe for concurrent use: a search answer may arrive after the
// user moved on, and is then ignored.
type Cache struct {
	mu    sync.Mutex
	scope Scope
	hints []Hint
}

// Enter makes s the current scope. If any part of it differs from the
// previous one, everything cached is dropped; it reports whether it was.
func (c *Cache) Enter(s Scope) (dropped bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s == c.scope {
		return false
	}
	c.scope, c.hints = s, nil
	return true
}

// Current is the current scope.
func (c *Cache) Current() Scope {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scope
}

// Store keeps hints obtained by a request made in scope s. An answer that
// arrives after the scope changed (a late answer for an old turn, or another
// account, authorization or workspace) is ignored: it reports false and
// caches nothing.
func (c *Cache) Store(s Scope, hints []Hint) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s != c.scope {
		return false
	}
	c.hints = append(c.hints, hints...)
	return true
}

// Hints returns the hints cached for scope s; none when s is not current.
func (c *Cache) Hints(s Scope) []Hint {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s != c.scope {
		return nil
	}
	return append([]Hint(nil), c.hints...)
}

// Allows says whether ref came from a hint cached in scope s, the current
// one. A host reads only such refs: a ref from another turn, account,
// authorization or workspace is never sent.
func (c *Cache) Allows(s Scope, ref string) bool {
	for _, h := range c.Hints(s) {
		if h.Ref == ref {
			return true
		}
	}
	return false
}
