package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// Documents (Q3, then Q4 for cache misses) returns the current documents among
// docIDs whose KB is one of kbIDs. Documents outside the fence or absent are
// not in the map. Ready documents carry Content and Revision; others only
// their metadata (Status tells why). KBID is given in the spelling of the
// matching kbIDs entry. Bodies come from the revision cache when the fresh
// metadata (doc_id, content_hash, updated_at) still matches.
func (c *SQLCatalog) Documents(ctx context.Context, docIDs []int64, kbIDs []string) (map[int64]corefacts.Document, error) {
	metas, err := c.metas(ctx, docIDs, kbIDs)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]corefacts.Document, len(metas))
	for _, m := range metas {
		d, ok, err := c.current(ctx, m, kbIDs)
		if err != nil {
			return nil, err
		}
		if ok {
			out[d.DocID] = d
		}
	}
	return out, nil
}

// Document is Documents for one id; ErrNotFound when absent or out of fence.
func (c *SQLCatalog) Document(ctx context.Context, docID int64, kbIDs []string) (corefacts.Document, error) {
	metas, err := c.metas(ctx, []int64{docID}, kbIDs)
	if err != nil {
		return corefacts.Document{}, err
	}
	if len(metas) == 0 {
		return corefacts.Document{}, fmt.Errorf("catalog document: %w", corefacts.ErrNotFound)
	}
	d, ok, err := c.current(ctx, metas[0], kbIDs)
	if err != nil {
		return corefacts.Document{}, err
	}
	if !ok {
		return corefacts.Document{}, fmt.Errorf("catalog document: %w", corefacts.ErrNotFound)
	}
	return d, nil
}

type metaRow struct {
	corefacts.DocMeta
	hashNull bool
}

// metas runs Q3 (no body) over docIDs × kbIDs, split into IN lists of at most
// MaxIDsPerQuery.
func (c *SQLCatalog) metas(ctx context.Context, docIDs []int64, kbIDs []string) ([]metaRow, error) {
	var out []metaRow
	docs := uniqueInts(docIDs)
	kbs := uniqueIDs(kbIDs)
	for _, dc := range chunks(docs) {
		for _, kc := range chunks(kbs) {
			err := c.do(ctx, QueryDocMeta, func(ctx context.Context) error {
				q := fmt.Sprintf(q3Meta, placeholders(len(dc)), placeholders(len(kc)))
				rows, err := c.db.QueryContext(ctx, q, append(anys(dc), anys(kc)...)...)
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var m metaRow
					var hash sql.NullString
					if err := rows.Scan(&m.DocID, &m.KBID, &m.Title, &m.Status, &hash, &m.UpdatedAt); err != nil {
						return err
					}
					m.ContentHash, m.hashNull = hash.String, !hash.Valid
					m.KBID = fenceSpelling(kbIDs, m.KBID)
					out = append(out, m)
				}
				return rows.Err()
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// current turns fresh metadata into the document: not ready → metadata only;
// cache hit → cached body; miss → Q4, fenced to the document's KB (which is
// one of the route's), and the result is cached. ok is false when the
// document vanished between Q3 and Q4.
func (c *SQLCatalog) current(ctx context.Context, m metaRow, kbIDs []string) (corefacts.Document, bool, error) {
	if m.Status != corefacts.StatusReady {
		return corefacts.Document{DocMeta: m.DocMeta}, true, nil
	}
	if e, ok := c.cache.get(keyOf(m.DocMeta, m.hashNull), m.Title); ok {
		return corefacts.Document{DocMeta: m.DocMeta, Content: e.content, Revision: e.revision}, true, nil
	}
	var b metaRow
	var content string
	err := c.do(ctx, QueryDocBody, func(ctx context.Context) error {
		var hash sql.NullString
		err := c.db.QueryRowContext(ctx, fmt.Sprintf(q4Body, placeholders(1)), m.DocID, m.KBID).
			Scan(&b.DocID, &b.KBID, &b.Title, &content, &hash, &b.Status, &b.UpdatedAt)
		b.ContentHash, b.hashNull = hash.String, !hash.Valid
		return err
	})
	if errors.Is(err, corefacts.ErrNotFound) {
		return corefacts.Document{}, false, nil
	}
	if err != nil {
		return corefacts.Document{}, false, err
	}
	b.KBID = fenceSpelling(kbIDs, b.KBID)
	if b.Status != corefacts.StatusReady { // changed since Q3: the fresher row wins
		return corefacts.Document{DocMeta: b.DocMeta}, true, nil
	}
	rev := corefacts.Revision(b.Title, content)
	c.cache.add(keyOf(b.DocMeta, b.hashNull), docEntry{title: b.Title, content: content, revision: rev})
	return corefacts.Document{DocMeta: b.DocMeta, Content: content, Revision: rev}, true, nil
}
