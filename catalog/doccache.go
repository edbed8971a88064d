package catalog

import (
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// docKey identifies one version of a document: Core rewrites updated_at on
// every status transition and content_hash on every content change, so a
// key that still matches the fresh metadata holds the current body. A NULL
// content_hash (rows older than migration 019) keys on doc_id + updated_at.
type docKey struct {
	docID     int64
	hash      string
	hashNull  bool
	updatedAt int64 // Unix nanoseconds, UTC
}

func keyOf(m corefacts.DocMeta, hashNull bool) docKey {
	return docKey{docID: m.DocID, hash: m.ContentHash, hashNull: hashNull, updatedAt: m.UpdatedAt.UTC().UnixNano()}
}

// docEntry is a cached body with its revision. The title is kept so that a
// title change under an unchanged key (never seen, but cheap to rule out) is a
// miss rather than a wrong revision.
type docEntry struct {
	title, content, revision string
}

func (e docEntry) size() int64 { return int64(len(e.title) + len(e.content) + len(e.revision) + 64) }

// docCache is the bounded revision/body cache: at most maxEntries entries and
// about maxBytes of text. Bodies larger than a quarter of maxBytes are never
// cached (they are read again, which is correct, only slower).
type docCache struct {
	mu       sync.Mutex // serialises Add + byte accounting
	lru      *lru.Cache[docKey, docEntry]
	bytes    int64
	maxBytes int64
}

func newDocCache(maxEntries int, maxBytes int64) *docCache {
	c := &docCache{maxBytes: maxBytes}
	// maxEntries > 0 is guaranteed by the options' defaults.
	c.lru, _ = lru.NewWithEvict(maxEntries, func(_ docKey, e docEntry) { c.bytes -= e.size() })
	return c
}

func (c *docCache) get(k docKey, title string) (docEntry, bool) {
	e, ok := c.lru.Get(k)
	if !ok || e.title != title {
		return docEntry{}, false
	}
	return e, true
}

func (c *docCache) add(k docKey, e docEntry) {
	sz := e.size()
	if sz > c.maxBytes/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.lru.Peek(k); ok {
		c.bytes -= old.size() // replacing does not call the eviction callback
	}
	c.lru.Add(k, e) // may evict the oldest entry; the callback runs before Add returns
	c.bytes += sz
	for c.bytes > c.maxBytes {
		if _, _, ok := c.lru.RemoveOldest(); !ok {
			break
		}
	}
}
