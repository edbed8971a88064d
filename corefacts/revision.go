package corefacts

import (
	"crypto/sha256"
	"encoding/hex"
)

// Revision is a document's revision as the protocol defines it:
// sha256 hex of title + "\x00" + content.
func Revision(title, content string) string {
	h := sha256.New()
	h.Write([]byte(title))
	h.Write([]byte{0})
	h.Write([]byte(content))
	return hex.EncodeToString(h.Sum(nil))
}
