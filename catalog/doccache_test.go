package catalog

import (
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

func TestDocKey(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := corefacts.DocMeta{DocID: 1, ContentHash: "h", UpdatedAt: at}
	cases := []struct {
		name string
		a, b docKey
		same bool
	}{
		{"same", keyOf(m, false), keyOf(m, false), true},
		{"same instant in another zone", keyOf(m, false), keyOf(corefacts.DocMeta{DocID: 1, ContentHash: "h", UpdatedAt: at.In(time.FixedZone("x", 3600))}, false), true},
		{"updated_at moved", keyOf(m, false), keyOf(corefacts.DocMeta{DocID: 1, ContentHash: "h", UpdatedAt: at.Add(time.Second)}, false), false},
		{"hash changed", keyOf(m, false), keyOf(corefacts.DocMeta{DocID: 1, ContentHash: "g", UpdatedAt: at}, false), false},
		{"other doc", keyOf(m, false), keyOf(corefacts.DocMeta{DocID: 2, ContentHash: "h", UpdatedAt: at}, false), false},
		{"NULL hash differs from empty", keyOf(corefacts.DocMeta{DocID: 1, UpdatedAt: at}, true), keyOf(corefacts.DocMeta{DocID: 1, UpdatedAt: at}, false), false},
	}
	for _, tc := range cases {
		if got := tc.a == tc.b; got != tc.same {
			t.Errorf("%s: got equal=%v; want %v", tc.name, got, tc.same)
		}
	}
}

func TestDocCache(t *testing.T) {
	key := func(id int64) docKey { return docKey{docID: id} }
	entry := func(n int) docEntry { return docEntry{title: "t", content: strings.Repeat("x", n), revision: "r"} }

	t.Run("hit and title mismatch", func(t *testing.T) {
		c := newDocCache(4, 1<<20)
		c.add(key(1), entry(10))
		if _, ok := c.get(key(1), "t"); !ok {
			t.Errorf("got miss; want hit")
		}
		if _, ok := c.get(key(1), "other title"); ok {
			t.Errorf("got hit for another title; want miss")
		}
	})
	t.Run("entry bound", func(t *testing.T) {
		c := newDocCache(2, 1<<20)
		for i := range int64(5) {
			c.add(key(i), entry(1))
		}
		if got := c.len(); got != 2 {
			t.Errorf("got %d entries; want 2", got)
		}
		if _, ok := c.get(key(4), "t"); !ok {
			t.Errorf("got newest evicted; want kept")
		}
	})
	t.Run("byte bound", func(t *testing.T) {
		e := entry(1000)
		c := newDocCache(100, 4*e.size())
		for i := range int64(10) {
			c.add(key(i), e)
		}
		if got := c.len(); got != 4 {
			t.Errorf("got %d entries; want 4", got)
		}
		if c.bytes != 4*e.size() {
			t.Errorf("got %d bytes accounted; want %d", c.bytes, 4*e.size())
		}
	})
	t.Run("replace keeps accounting", func(t *testing.T) {
		c := newDocCache(10, 1<<20)
		c.add(key(1), entry(100))
		c.add(key(1), entry(10))
		if want := entry(10).size(); c.bytes != want {
			t.Errorf("got %d bytes; want %d", c.bytes, want)
		}
	})
	t.Run("oversized body not cached", func(t *testing.T) {
		c := newDocCache(10, 1000)
		c.add(key(1), entry(300))
		if c.len() != 0 || c.bytes != 0 {
			t.Errorf("got %d entries, %d bytes; want none", c.len(), c.bytes)
		}
	})
}
