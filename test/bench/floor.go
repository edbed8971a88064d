package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// The floor role answers /floor/search and /floor/read with exactly the
// round trips the sidecar's search and read cannot do without — SPEC §2
// asks identity and the route gate of Core on every request, the catalog
// is read, and a search asks Core's /kb/search once per searchable KB of
// the route — made with net/http's own client and database/sql with the
// same driver and DSN the sidecar uses, and nothing else: no JSON is
// decoded, no ref is sealed or opened, no rule is checked, and the answer
// is a canned body of the size the sidecar's answer has (?bytes=N). Its
// CPU per request, as a multiple of one lean pass-through request in the
// same rounds, is the multiple no implementation within net/http and
// database/sql can go below; the sidecar's own work is what it spends
// above it.
//
// The statements are the catalog's shapes (the route with its KB rows,
// and with the document for a read; then the hits' document rows for a
// search) over the bench world's rows.
const (
	floorBundle    = "SELECT r.route_key, r.enabled, r.knowledge, b.kb_id, b.enabled FROM bz_routes r LEFT JOIN bz_kb_bases b ON b.kb_id IN (?) WHERE r.route_key = ?"
	floorBundleDoc = "SELECT r.route_key, r.enabled, r.knowledge, b.kb_id, b.enabled, d.doc_id, d.kb_id, d.title, d.status, d.content_hash, d.updated_at FROM bz_routes r LEFT JOIN bz_kb_bases b ON b.kb_id IN (?) LEFT JOIN bz_kb_docs d ON d.doc_id = ? AND d.kb_id IN (?) WHERE r.route_key = ?"
	floorMeta      = "SELECT doc_id, kb_id, title, status, content_hash, updated_at FROM bz_kb_docs WHERE doc_id IN (?, ?, ?, ?, ?, ?) AND kb_id IN (?)"
)

type floor struct {
	core    string // Core's base URL
	client  *http.Client
	db      *sql.DB // nil: no catalog (--catalog mem), no statements
	payload []byte  // the /kb/search body the sidecar sends for the bench query
}

func newFloor(coreURL, dsn string) (http.Handler, func(), error) {
	// The sidecar's top_k for the bench route: max(route top_k 8, 4 × limit 3), at most 20.
	payload, _ := json.Marshal(map[string]any{"kb_ids": []string{benchKB}, "query": searchQuery, "top_k": 12, "min_score": corefacts.UnfilteredMinScore})
	f := &floor{core: strings.TrimRight(coreURL, "/"), client: &http.Client{Transport: leanTransport()}, payload: payload}
	closer := func() {}
	if dsn != "" {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, nil, errors.New("floor: unusable catalog DSN")
		}
		cfg.InterpolateParams = true // as the catalog opens it
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return nil, nil, errors.New("floor: catalog open failed")
		}
		db.SetMaxOpenConns(10)
		db.SetMaxIdleConns(10)
		f.db, closer = db, func() { db.Close() }
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /floor/search", f.search)
	mux.HandleFunc("POST /floor/read", f.read)
	mux.HandleFunc("GET /bench/json/1k", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(jsonBody(1 << 10)) }) // the probe
	return mux, closer, nil
}

func (f *floor) search(w http.ResponseWriter, r *http.Request) {
	f.serve(w, r, func(ctx context.Context) error {
		if err := f.query(ctx, floorBundle, 5, benchKB, routeKB); err != nil {
			return err
		}
		if err := f.call(ctx, http.MethodPost, "/kb/search", "Bearer "+benchService, f.payload); err != nil {
			return err
		}
		return f.query(ctx, floorMeta, 6, 1, 2, 3, 4, 5, 6, benchKB)
	})
}

func (f *floor) read(w http.ResponseWriter, r *http.Request) {
	f.serve(w, r, func(ctx context.Context) error {
		return f.query(ctx, floorBundleDoc, 11, benchKB, 1, benchKB, routeKB)
	})
}

// serve answers r as the sidecar would after its work: the body drained,
// the gates asked, then work; 502 with the first error.
func (f *floor) serve(w http.ResponseWriter, r *http.Request, work func(context.Context) error) {
	ctx := r.Context()
	_, _ = io.Copy(io.Discard, r.Body)
	err := f.gates(ctx, r.Header.Get("Authorization"))
	if err == nil {
		err = work(ctx)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	f.answer(w, r)
}

// gates asks Core who the caller is and whether the route is served to
// them, one after the other, as the sidecar does.
func (f *floor) gates(ctx context.Context, auth string) error {
	if err := f.call(ctx, http.MethodGet, "/agent-auth/v1/session", auth, nil); err != nil {
		return err
	}
	return f.call(ctx, http.MethodGet, "/agent-api/v1/workspaces/"+routeKB+"/system-info", auth, nil)
}

// call makes one Core request and reads its answer to the end.
func (f *floor) call(ctx context.Context, method, path, auth string, body []byte) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, f.core+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("floor: %s answered %d", path, resp.StatusCode)
	}
	return nil
}

// query runs one statement and scans every row into cols raw columns.
func (f *floor) query(ctx context.Context, q string, cols int, args ...any) error {
	if f.db == nil {
		return nil
	}
	rows, err := f.db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	dst := make([]any, cols)
	for i := range dst {
		dst[i] = new(sql.RawBytes)
	}
	n := 0
	for rows.Next() {
		if err := rows.Scan(dst...); err != nil {
			return err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n == 0 {
		return errors.New("floor: no row")
	}
	return nil
}

var floorBodies sync.Map // size → []byte

// answer writes a canned JSON body of ?bytes=N bytes.
func (f *floor) answer(w http.ResponseWriter, r *http.Request) {
	n, _ := strconv.Atoi(r.URL.Query().Get("bytes"))
	n = max(n, 2)
	b, ok := floorBodies.Load(n)
	if !ok {
		body := make([]byte, n)
		body[0], body[n-1] = '{', '}'
		for i := 1; i < n-1; i++ {
			body[i] = ' '
		}
		b, _ = floorBodies.LoadOrStore(n, body)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(n))
	_, _ = w.Write(b.([]byte))
}
