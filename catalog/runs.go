package catalog

import (
	"context"
	"database/sql"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// Run (Q5) returns a run row; ErrNotFound when absent. The lookup is
// case-insensitive (CHAR(36) with a _ci collation).
func (c *SQLCatalog) Run(ctx context.Context, runID string) (corefacts.Run, error) {
	var r corefacts.Run
	err := c.do(ctx, QueryRun, func(ctx context.Context) error {
		var completed sql.NullTime
		err := c.db.QueryRowContext(ctx, q5Run, runID).Scan(&r.RunID, &r.SessionID, &r.ClientAppID, &r.RouteKey, &r.Status, &completed)
		if completed.Valid {
			t := completed.Time.UTC()
			r.CompletedAt = &t
		}
		return err
	})
	if err != nil {
		return corefacts.Run{}, err
	}
	return r, nil
}
