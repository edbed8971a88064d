package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// do runs one query through the catalog breaker with the per-query timeout and
// turns its error into the catalog's error contract:
//   - sql.ErrNoRows → ErrNotFound (a success for the breaker);
//   - the caller's ctx done → its ctx error (excluded by the breaker);
//   - anything else → *CatalogError (wraps ErrUnavailable, trips the breaker).
func (c *SQLCatalog) do(ctx context.Context, query string, fn func(context.Context) error) error {
	start := time.Now()
	err := c.breaker.Do(ctx, func(ctx context.Context) error {
		qctx, cancel := context.WithTimeout(ctx, c.opts.QueryTimeout)
		defer cancel()
		if c.tracer != nil && trace.SpanContextFromContext(qctx).IsValid() {
			// Queries of a request only: background checks start no trace.
			var span trace.Span
			qctx, span = startQuerySpan(qctx, c.tracer, query)
			err := classify(ctx, query, fn(qctx))
			endQuerySpan(span, outcomeOf(err))
			return err
		}
		return classify(ctx, query, fn(qctx))
	})
	if c.tracer != nil && errors.Is(err, corefacts.ErrBreakerOpen) {
		breaker.MarkRefused(ctx, c.breaker)
	}
	if c.opts.Metrics != nil {
		c.opts.Metrics.Observe(query, outcomeOf(err), time.Since(start), "")
	}
	return err
}

func classify(parent context.Context, query string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("catalog %s: %w", query, corefacts.ErrNotFound)
	case parent.Err() != nil:
		return fmt.Errorf("catalog %s query abandoned: %w", query, parent.Err())
	case errors.Is(err, corefacts.ErrTaskUnavailable): // the database answered (tasks.go)
		return err
	}
	reason := "connection failed"
	var me *mysql.MySQLError
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		reason = "timeout"
	case errors.As(err, &me):
		switch me.Number {
		case 1044, 1045, 1142, 1143, 1227: // access denied to db/user/table/column/operation
			reason = "access denied"
		case 1054, 1146: // unknown column, no such table
			reason = "schema mismatch"
		default:
			reason = "server error"
		}
	}
	return &CatalogError{Query: query, Reason: reason, err: err}
}

// eachString runs the query q with args and calls f with each row's one
// string column.
func (c *SQLCatalog) eachString(ctx context.Context, q string, args []any, f func(string)) error {
	rows, err := c.db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return err
		}
		f(s)
	}
	return rows.Err()
}

func outcomeOf(err error) string {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, corefacts.ErrNotFound):
		return OutcomeNotFound
	case errors.Is(err, corefacts.ErrTaskUnavailable):
		return OutcomeQueryError
	case errors.Is(err, corefacts.ErrBreakerOpen):
		return OutcomeOpen
	case errors.Is(err, corefacts.ErrUnavailable):
		return OutcomeUnavailable
	default:
		return OutcomeCanceled
	}
}

// fenceSpelling returns the entry of kbIDs that names kb, so that callers can
// compare a document's KB with the route's list by plain equality. When none
// matches in Go (an accent-insensitive collation match), kb is kept as stored:
// the database did the fencing and Go never filters it again.
func fenceSpelling(kbIDs []string, kb string) string {
	for _, id := range kbIDs {
		if corefacts.SameID(id, kb) {
			return id
		}
	}
	return kb
}

// uniqueIDs drops empty ids and duplicates under SameID, keeping order.
func uniqueIDs(ids []string) []string {
	out := make([]string, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		k := foldID(id)
		if k == "" || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, id)
	}
	return out
}

func foldID(id string) string { return strings.ToLower(strings.TrimRight(id, " ")) }

func uniqueInts(ids []int64) []int64 {
	out := make([]int64, 0, len(ids))
	seen := make(map[int64]bool, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

func chunks[T any](xs []T) [][]T {
	var out [][]T
	for len(xs) > 0 {
		n := min(len(xs), MaxIDsPerQuery)
		out = append(out, xs[:n])
		xs = xs[n:]
	}
	return out
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}
