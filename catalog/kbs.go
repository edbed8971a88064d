package catalog

import (
	"context"
	"fmt"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// KBEnabled (Q2) maps each requested KB id that exists to its enabled flag
// (enabled <> 0). Keys are the ids as requested; a row matches a requested id
// the way the database's case-insensitive collation does (SameID). A missing
// id was deleted.
func (c *SQLCatalog) KBEnabled(ctx context.Context, kbIDs []string) (map[string]bool, error) {
	kbs, err := c.KBs(ctx, kbIDs)
	return enabledFlags(kbs), err
}

// enabledFlags is KBEnabled's view of a KBs answer (nil stays nil).
func enabledFlags(kbs map[string]corefacts.KB) map[string]bool {
	if kbs == nil {
		return nil
	}
	out := make(map[string]bool, len(kbs))
	for id, kb := range kbs {
		out[id] = kb.Enabled
	}
	return out
}

// KBs (Q2) is KBEnabled with each row's kb_id as stored: keys are the ids
// as requested, KB.ID the database's spelling (the one to send to Core).
func (c *SQLCatalog) KBs(ctx context.Context, kbIDs []string) (map[string]corefacts.KB, error) {
	out := make(map[string]corefacts.KB, len(kbIDs))
	ids := uniqueIDs(kbIDs)
	for _, chunk := range chunks(ids) {
		err := c.do(ctx, QueryKBs, func(ctx context.Context) error {
			rows, err := c.db.QueryContext(ctx, fmt.Sprintf(q2KBs, placeholders(len(chunk))), anys(chunk)...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				var enabled int64
				if err := rows.Scan(&id, &enabled); err != nil {
					return err
				}
				for _, want := range kbIDs {
					if corefacts.SameID(want, id) {
						out[want] = corefacts.KB{ID: id, Enabled: enabled != 0}
					}
				}
			}
			return rows.Err()
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ReadyKBs (Q9) reports which of kbIDs hold at least one document with
// status ready: keys are the ids as requested (matched like KBs), only
// true values. A KB without a row is never ready. Search asks it only for
// the KBs whose unfiltered /kb/search answer had no hit at all: such a KB
// that holds a ready document has failed silently (SPEC §4).
func (c *SQLCatalog) ReadyKBs(ctx context.Context, kbIDs []string) (map[string]bool, error) {
	out := make(map[string]bool, len(kbIDs))
	ids := uniqueIDs(kbIDs)
	for _, chunk := range chunks(ids) {
		err := c.do(ctx, QueryReadyKBs, func(ctx context.Context) error {
			return c.eachString(ctx, fmt.Sprintf(q9ReadyKBs, placeholders(len(chunk))), append(anys(chunk), corefacts.StatusReady), func(id string) {
				for _, want := range kbIDs {
					if corefacts.SameID(want, id) {
						out[want] = true
					}
				}
			})
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
