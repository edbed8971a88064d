package testdb

import (
	"context"
	"fmt"
)

// CoreIndex is the knowledge index of a Core double (internal/fakecore's
// Core): what Core's /kb/search answers from.
type CoreIndex interface {
	AddKB(kbID string)
	DisableKB(kbID string)
	AddDoc(kbID string, docID int64, title, content string)
}

// IndexIn (re)indexes every knowledge base and document of the database in
// core, so that Core's /kb/search and the catalog agree, as in production.
func (d *DB) IndexIn(ctx context.Context, core CoreIndex) error {
	rows, err := d.Admin.QueryContext(ctx, `SELECT kb_id, enabled FROM bz_kb_bases`)
	if err != nil {
		return fmt.Errorf("testdb: kbs: %w", err)
	}
	for rows.Next() {
		var id string
		var enabled bool
		if err := rows.Scan(&id, &enabled); err != nil {
			rows.Close()
			return fmt.Errorf("testdb: kbs: %w", err)
		}
		core.AddKB(id)
		if !enabled {
			core.DisableKB(id)
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	rows, err = d.Admin.QueryContext(ctx, `SELECT doc_id, kb_id, title, content FROM bz_kb_docs`)
	if err != nil {
		return fmt.Errorf("testdb: docs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var kb, title, content string
		if err := rows.Scan(&id, &kb, &title, &content); err != nil {
			return fmt.Errorf("testdb: docs: %w", err)
		}
		core.AddDoc(kb, id, title, content)
	}
	return rows.Err()
}
