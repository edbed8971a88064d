package knowledge

import (
	lru "github.com/hashicorp/golang-lru/v2"
)

// recheckCacheSize bounds the memo of hit re-checks: entries hold a hit's
// text (a Core chunk, at most about 2 KiB), so the memo stays within about 4 MiB.
const recheckCacheSize = 2048

// recheckKey is one re-check: a hit text against one document revision
// (SHA-256 of title and content, so the content is fixed by it).
type recheckKey struct {
	revision string
	hit      string
}

// recheckMemo remembers whether a hit text occurs in a document revision.
// The answer is a pure function of the two, so a remembered answer is the
// answer: the memo never serves a stale result, it only skips the scan of a
// document for a chunk that Core retrieves again (the same chunks of popular
// documents recur across searches and turns). Safe for concurrent use.
type recheckMemo struct {
	lru *lru.Cache[recheckKey, bool]
}

func newRecheckMemo() (*recheckMemo, error) {
	c, err := lru.New[recheckKey, bool](recheckCacheSize)
	if err != nil {
		return nil, err
	}
	return &recheckMemo{lru: c}, nil
}

// lookup returns the remembered re-check of hit against revision; known is
// false when there is none (or no revision to key it by).
func (m *recheckMemo) lookup(revision, hit string) (found, known bool) {
	if revision == "" {
		return false, false
	}
	return m.lru.Get(recheckKey{revision, hit})
}

// store remembers a re-check done against revision.
func (m *recheckMemo) store(revision, hit string, found bool) {
	if revision != "" {
		m.lru.Add(recheckKey{revision, hit}, found)
	}
}
