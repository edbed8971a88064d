package main

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/coredb"
)

// defaultRehearsalDSN is demo --sql's admin DSN: a local server's root
// without a password, as a developer's MariaDB is installed.
const defaultRehearsalDSN = "root@tcp(127.0.0.1:3306)/"

// rehearsalTimeout bounds creating and seeding the throwaway database.
const rehearsalTimeout = 30 * time.Second

// rehearsal is demo --sql's throwaway Core database: the demo's documents
// as Core's tables, read by the sidecar through a user with exactly the
// documented GRANTs.
type rehearsal struct {
	db *coredb.DB
}

// startRehearsal creates the database and the read-only user on the server
// of adminDSN and seeds the demo world into it.
func startRehearsal(ctx context.Context, adminDSN string, docs []demoDoc) (*rehearsal, error) {
	ctx, cancel := context.WithTimeout(ctx, rehearsalTimeout)
	defer cancel()
	db, err := coredb.Create(ctx, adminDSN, coredb.Options{DBPrefix: "ks_demo_", UserPrefix: "ks_demo_ro_"})
	if err != nil {
		return nil, fmt.Errorf("%w (--sql-dsn names a MySQL/MariaDB account that may create databases and users)", err)
	}
	r := &rehearsal{db: db}
	if err := r.seed(ctx, docs); err != nil {
		_ = db.Drop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("seed: %w", err)
	}
	return r, nil
}

// seed writes the demo world as Core stores it: the knowledge base, the
// route with its knowledge settings, the host's client app and every
// document (ready, with Core's content hash).
func (r *rehearsal) seed(ctx context.Context, docs []demoDoc) error {
	now := time.Now().UTC().Truncate(time.Second)
	routes, _ := json.Marshal([]string{demoRoute})
	stmts := []struct {
		q    string
		args []any
	}{
		{"INSERT INTO bz_kb_bases (kb_id, enabled, updated_at) VALUES (?, 1, ?)", []any{demoKB, now}},
		{"INSERT INTO bz_routes (route_key, enabled, knowledge, updated_at) VALUES (?, 1, ?, ?)", []any{demoRoute, demoKnowledge, now}},
		// Core keeps a Client Token in plaintext; this one is random and
		// unreadable by the sidecar's user (no GRANT on the column).
		{"INSERT INTO bz_clients (app_id, token, enabled, allowed_routes, agent_authorize_url, rate_limit_per_min) VALUES (?, ?, 1, ?, ?, 0)",
			[]any{demoClient, randomHex32(), string(routes), "http://127.0.0.1:8765/callback"}},
	}
	for i, d := range docs {
		sum := md5.Sum([]byte(d.title + "\x00" + d.content))
		stmts = append(stmts, struct {
			q    string
			args []any
		}{"INSERT INTO bz_kb_docs (doc_id, kb_id, title, content, content_hash, status, chunk_count, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'ready', 1, ?, ?)",
			[]any{i + 1, demoKB, d.title, d.content, hex.EncodeToString(sum[:]), now, now}})
	}
	for _, st := range stmts {
		if _, err := r.db.Admin.ExecContext(ctx, st.q, st.args...); err != nil {
			return err
		}
	}
	return nil
}

func randomHex32() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// putRun records a run the Core double created, as Core does, so the
// sidecar's catalog sees the turn's run (turn hints are read with it).
func (r *rehearsal) putRun(log *slog.Logger) func(corefacts.Run) {
	return func(run corefacts.Run) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := r.db.Admin.ExecContext(ctx, `INSERT INTO bz_agent_client_runs
			(run_id, session_id, client_app_id, route_key, status, created_at, updated_at)
			VALUES (?, ?, ?, ?, 'context_ready', UTC_TIMESTAMP(), UTC_TIMESTAMP())`,
			run.RunID, run.SessionID, run.ClientAppID, run.RouteKey); err != nil {
			log.Error("demo --sql: cannot record the turn's run", slog.Any("error", err))
		}
	}
}

// drop removes the database and the user, saying so.
func (r *rehearsal) drop(stderr io.Writer) {
	if err := r.db.Drop(context.Background()); err != nil {
		fmt.Fprintf(stderr, "demo --sql: could not drop database %s and user %s: %v\n", r.db.Name, r.db.User, err)
		return
	}
	fmt.Fprintf(stderr, "demo --sql: dropped database %s and user %s\n", r.db.Name, r.db.User)
}

// rehearsalEnv is the environment that gives `check-config`, `serve` and
// the other operator commands the rehearsal's Core, token, catalog and
// rollout, in the order printed.
func (r *rehearsal) rehearsalEnv(cfg config.Config) [][2]string {
	return [][2]string{
		{"KNOWLEDGE_SIDECAR_CORE_URL", cfg.Core.URL},
		{"KNOWLEDGE_SIDECAR_CORE_TOKEN", cfg.Core.Token},
		{"KNOWLEDGE_SIDECAR_CATALOG_DSN", cfg.Catalog.DSN},
		{"KNOWLEDGE_SIDECAR_ROLLOUT", cfg.Rollout},
	}
}

// shellWord single-quotes s for a POSIX shell.
func shellWord(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// printChecks prints what the SQL rehearsal runs on and the operator's
// verification commands against it.
func (r *rehearsal) printChecks(w io.Writer, cfg config.Config, addr, admin, token string) {
	fmt.Fprintf(w, `
Production path (--sql): serve's own build, with the SQL catalog behind its schema gate.
  database  %s   (throwaway; dropped with the user when the demo stops)
  user      %s   (read-only: exactly the GRANTs of docs/core-contract.md)

The operator's checks, in another terminal (the environment serve would have; these values
are this rehearsal's own, printed on purpose — never print a production DSN or token):

`, r.db.Name, r.db.User)
	for _, kv := range r.rehearsalEnv(cfg) {
		fmt.Fprintf(w, "  export %s=%s\n", kv[0], shellWord(kv[1]))
	}
	fmt.Fprintf(w, `  export KNOWLEDGE_SIDECAR_PROBE_AGENT_TOKEN=%s
  export BAILING_AGENT_TOKEN=%s

  # Core, the token, system-info, the catalog's schema and every GRANT, the signing keys: all ok
  knowledge-sidecar check-config --probe
  # what the running sidecar runs: catalog schema ok, rollout allow:%s
  knowledge-sidecar status --admin http://%s
  # whether the workspace is served and why, offline from this environment
  knowledge-sidecar check-config --route %s
  # every MUST of the protocol, as a host sees it
  knowledge-sidecar conformance --url http://%s --route %s

`, token, token, demoRoute, admin, demoRoute, addr, demoRoute)
}
