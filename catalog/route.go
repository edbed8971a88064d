package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// Route (Q1) returns the route with its normalized knowledge config. Key is
// the stored route_key (the lookup is case-insensitive, as the database's
// collation is). ErrNotFound when unknown.
func (c *SQLCatalog) Route(ctx context.Context, key corefacts.RouteKey) (corefacts.Route, error) {
	row, err := c.route(ctx, key)
	if err != nil {
		return corefacts.Route{}, err
	}
	return routeOf(row.key, row.enabled, row.knowledge)
}

type routeRow struct {
	key                 string
	enabled             bool
	knowledge, audience []byte
}

func (c *SQLCatalog) route(ctx context.Context, key corefacts.RouteKey) (routeRow, error) {
	var r routeRow
	err := c.do(ctx, QueryRoute, func(ctx context.Context) error {
		var enabled int64
		err := c.db.QueryRowContext(ctx, q1Route, key.String()).Scan(&r.key, &enabled, &r.knowledge, &r.audience)
		r.enabled = enabled != 0
		return err
	})
	return r, err
}

// RouteBundle reads route key with the rows of kbIDs and, when docID > 0,
// the document docID fenced to kbIDs, in one statement (q1Bundle,
// q1BundleDoc; a body missing from the revision cache costs Q4). The route
// is ErrNotFound when unknown, as Route. Longer KB lists than one IN list
// holds fall back to Route, KBs and Document.
func (c *SQLCatalog) RouteBundle(ctx context.Context, key corefacts.RouteKey, kbIDs []string, docID int64) (corefacts.RouteBundle, error) {
	kbs := uniqueIDs(kbIDs)
	if len(kbs) == 0 || len(kbs) > MaxIDsPerQuery {
		return bundleApart(ctx, c, key, kbIDs, docID)
	}
	var (
		row     routeRow
		b       = corefacts.RouteBundle{KBs: make(map[string]corefacts.KB, len(kbs)), Asked: kbIDs}
		meta    metaRow
		hasMeta bool
	)
	err := c.do(ctx, QueryRoute, func(ctx context.Context) error {
		var rows *sql.Rows
		var err error
		if docID > 0 {
			args := append(anys(kbs), docID)
			args = append(append(args, anys(kbs)...), key.String())
			rows, err = c.db.QueryContext(ctx, fmt.Sprintf(q1BundleDoc, placeholders(len(kbs)), placeholders(len(kbs))), args...)
		} else {
			rows, err = c.db.QueryContext(ctx, fmt.Sprintf(q1Bundle, placeholders(len(kbs))), append(anys(kbs), key.String())...)
		}
		if err != nil {
			return err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var (
				enabled   int64
				kbID      sql.NullString
				kbEnabled sql.NullInt64
				dst       = []any{&row.key, &enabled, &row.knowledge, &kbID, &kbEnabled}
				dID       sql.NullInt64
				dKB, dT   sql.NullString
				dSt, hash sql.NullString
				dUp       sql.NullTime
			)
			if docID > 0 {
				dst = append(dst, &dID, &dKB, &dT, &dSt, &hash, &dUp)
			}
			if err := rows.Scan(dst...); err != nil {
				return err
			}
			n++
			row.enabled = enabled != 0
			if kbID.Valid {
				for _, want := range kbIDs {
					if corefacts.SameID(want, kbID.String) {
						b.KBs[want] = corefacts.KB{ID: kbID.String, Enabled: kbEnabled.Int64 != 0}
					}
				}
			}
			if dID.Valid && !hasMeta {
				hasMeta = true
				meta = metaRow{DocMeta: corefacts.DocMeta{DocID: dID.Int64, KBID: fenceSpelling(kbIDs, dKB.String), Title: dT.String,
					Status: dSt.String, ContentHash: hash.String, UpdatedAt: dUp.Time}, hashNull: !hash.Valid}
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if n == 0 {
			return sql.ErrNoRows
		}
		return nil
	})
	if err != nil {
		return corefacts.RouteBundle{}, err
	}
	if b.Route, err = routeOf(row.key, row.enabled, row.knowledge); err != nil {
		return corefacts.RouteBundle{}, err
	}
	if hasMeta {
		b.Doc, b.DocFound, b.DocErr = c.current(ctx, meta, kbIDs)
	}
	return b, nil
}

// bundleSource is what a bundle read apart needs: SQLCatalog and MemCatalog.
type bundleSource interface {
	Route(ctx context.Context, key corefacts.RouteKey) (corefacts.Route, error)
	KBs(ctx context.Context, kbIDs []string) (map[string]corefacts.KB, error)
	Document(ctx context.Context, docID int64, kbIDs []string) (corefacts.Document, error)
}

// bundleApart is RouteBundle in separate reads: the SQL catalog's when no KB
// is asked or more than one IN list holds, and the whole of MemCatalog's.
func bundleApart(ctx context.Context, c bundleSource, key corefacts.RouteKey, kbIDs []string, docID int64) (corefacts.RouteBundle, error) {
	r, err := c.Route(ctx, key)
	if err != nil {
		return corefacts.RouteBundle{}, err
	}
	b := corefacts.RouteBundle{Route: r, Asked: kbIDs}
	if len(kbIDs) == 0 {
		b.KBs = map[string]corefacts.KB{}
		return b, nil
	}
	if b.KBs, err = c.KBs(ctx, kbIDs); err != nil {
		return corefacts.RouteBundle{}, err
	}
	if docID > 0 {
		b.Doc, b.DocErr = c.Document(ctx, docID, kbIDs)
		b.DocFound = b.DocErr == nil
		if errors.Is(b.DocErr, corefacts.ErrNotFound) {
			b.DocErr = nil
		}
	}
	return b, nil
}

// routeOf builds a Route, shared with MemCatalog. A malformed knowledge column
// is reported as unavailable: the sidecar cannot tell what Core would do.
func routeOf(key string, enabled bool, knowledge []byte) (corefacts.Route, error) {
	kc, err := normalized.get(knowledge)
	if err != nil {
		return corefacts.Route{}, fmt.Errorf("%w: route knowledge: %w", corefacts.ErrUnavailable, err)
	}
	return corefacts.Route{Key: key, Enabled: enabled, Knowledge: kc}, nil
}

// Bounds of the normalization memo.
const (
	normMemoEntries = 256
	normMemoMaxRaw  = 4 << 10
)

// normalized memoizes NormalizeKnowledge, a pure function of the column's
// bytes, so the JSON decoding is not redone on every Route call of every
// request. It is not a cache of the route: the row is still read on every
// call, and a changed column is a different key. Safe for concurrent use.
var normalized = &normMemo{m: map[string]normResult{}}

type normMemo struct {
	mu sync.RWMutex
	m  map[string]normResult // by the raw column bytes
}

type normResult struct {
	kc  *corefacts.KnowledgeConfig
	err error
}

// get returns NormalizeKnowledge(raw), with a config of the caller's own (the
// memo's copy is never handed out, so callers may modify theirs). Columns
// longer than normMemoMaxRaw are not memoized; when the memo is full it is
// emptied (route configurations are few, so this happens only on churn).
func (n *normMemo) get(raw []byte) (*corefacts.KnowledgeConfig, error) {
	if len(raw) > normMemoMaxRaw {
		return NormalizeKnowledge(raw)
	}
	n.mu.RLock()
	r, ok := n.m[string(raw)]
	n.mu.RUnlock()
	if !ok {
		r.kc, r.err = NormalizeKnowledge(raw)
		n.mu.Lock()
		if len(n.m) >= normMemoEntries {
			clear(n.m)
		}
		n.m[string(raw)] = r
		n.mu.Unlock()
	}
	return cloneKnowledge(r.kc), r.err
}

// cloneKnowledge is a deep copy; nil stays nil.
func cloneKnowledge(k *corefacts.KnowledgeConfig) *corefacts.KnowledgeConfig {
	if k == nil {
		return nil
	}
	c := *k
	c.KBIDs = append([]string(nil), k.KBIDs...)
	return &c
}

// RouteGate is the gate for Cores without system-info (Q1 + Q7, session from
// HTTP). See decideGate for the rules; nil means allowed, otherwise a
// *CoreError, or an error wrapping ErrUnavailable.
func (c *SQLCatalog) RouteGate(ctx context.Context, route corefacts.RouteKey, s corefacts.Session) error {
	var gr *gateRoute
	row, err := c.route(ctx, route)
	switch {
	case err == nil:
		gr = &gateRoute{Enabled: row.enabled, Audience: row.audience}
	case !errors.Is(err, corefacts.ErrNotFound):
		return err
	default:
		return decideGate(route.String(), nil, nil, s)
	}
	var gc *gateClient
	if s.ClientAppID != "" {
		var cl gateClient
		err := c.do(ctx, QueryClient, func(ctx context.Context) error {
			var enabled int64
			var url sql.NullString
			var appID string
			err := c.db.QueryRowContext(ctx, q7Client, s.ClientAppID).Scan(&appID, &enabled, &cl.AllowedRoutes, &url)
			cl.Enabled, cl.AuthorizeURL = enabled != 0, url.String
			return err
		})
		switch {
		case err == nil:
			gc = &cl
		case !errors.Is(err, corefacts.ErrNotFound):
			return err
		}
	}
	return decideGate(route.String(), gr, gc, s)
}
