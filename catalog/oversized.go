package catalog

import (
	"context"
	"fmt"
	"sort"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// The oversized-documents queries (/-/explain, check-config --route): the
// documents of some KBs whose content is longer than a number of bytes
// (LENGTH is bytes in MariaDB and MySQL), largest first, and how many there
// are. Only granted columns are read.
const (
	q10Oversized      = "SELECT doc_id, kb_id, title, LENGTH(content) FROM bz_kb_docs WHERE kb_id IN (%s) AND LENGTH(content) > ? ORDER BY LENGTH(content) DESC, doc_id LIMIT ?"
	q10OversizedCount = "SELECT COUNT(*) FROM bz_kb_docs WHERE kb_id IN (%s) AND LENGTH(content) > ?"
)

// QueryOversized is OversizedDocuments (the "query" label of the catalog
// metrics).
const QueryOversized = "oversized_docs"

// DocSize is one document and the byte length of its content.
type DocSize struct {
	DocID int64
	KBID  string // in the spelling of the matching kbIDs entry
	Title string
	Bytes int64
}

// OversizedDocuments lists the documents of kbIDs (any status) whose content
// is longer than overBytes: at most limit of them, largest first (then by
// doc_id), and how many there are in all.
func (c *SQLCatalog) OversizedDocuments(ctx context.Context, kbIDs []string, overBytes int64, limit int) ([]DocSize, int, error) {
	var out []DocSize
	total := 0
	for _, chunk := range chunks(uniqueIDs(kbIDs)) {
		err := c.do(ctx, QueryOversized, func(ctx context.Context) error {
			var n int
			if err := c.db.QueryRowContext(ctx, fmt.Sprintf(q10OversizedCount, placeholders(len(chunk))), append(anys(chunk), overBytes)...).Scan(&n); err != nil {
				return err
			}
			total += n
			if n == 0 || limit <= 0 {
				return nil
			}
			rows, err := c.db.QueryContext(ctx, fmt.Sprintf(q10Oversized, placeholders(len(chunk))), append(anys(chunk), overBytes, limit)...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var d DocSize
				if err := rows.Scan(&d.DocID, &d.KBID, &d.Title, &d.Bytes); err != nil {
					return err
				}
				d.KBID = fenceSpelling(kbIDs, d.KBID)
				out = append(out, d)
			}
			return rows.Err()
		})
		if err != nil {
			return nil, 0, err
		}
	}
	return largestFirst(out, limit), total, nil
}

// largestFirst sorts by size (descending), then doc_id, and keeps limit.
func largestFirst(docs []DocSize, limit int) []DocSize {
	sort.Slice(docs, func(i, j int) bool {
		if docs[i].Bytes != docs[j].Bytes {
			return docs[i].Bytes > docs[j].Bytes
		}
		return docs[i].DocID < docs[j].DocID
	})
	if len(docs) > limit {
		docs = docs[:max(limit, 0)]
	}
	return docs
}

// OversizedDocuments implements SQLCatalog.OversizedDocuments's rules.
func (m *MemCatalog) OversizedDocuments(_ context.Context, kbIDs []string, overBytes int64, limit int) ([]DocSize, int, error) {
	if err := m.rlock(); err != nil {
		return nil, 0, err
	}
	defer m.mu.RUnlock()
	var out []DocSize
	for _, d := range m.docs {
		if int64(len(d.Content)) <= overBytes {
			continue
		}
		for _, kb := range kbIDs {
			if kb != "" && corefacts.SameID(kb, d.KBID) {
				out = append(out, DocSize{DocID: d.DocID, KBID: kb, Title: d.Title, Bytes: int64(len(d.Content))})
				break
			}
		}
	}
	total := len(out)
	return largestFirst(out, limit), total, nil
}

// OversizedDocuments passes the inner catalog's list on, when it has one.
func (g *SchemaGate) OversizedDocuments(ctx context.Context, kbIDs []string, overBytes int64, limit int) ([]DocSize, int, error) {
	o, ok := g.inner.(interface {
		OversizedDocuments(context.Context, []string, int64, int) ([]DocSize, int, error)
	})
	if !ok {
		return nil, 0, fmt.Errorf("catalog oversized documents: %w", corefacts.ErrNotFound)
	}
	if err := g.ready(ctx); err != nil {
		return nil, 0, err
	}
	return o.OversizedDocuments(ctx, kbIDs, overBytes, limit)
}
