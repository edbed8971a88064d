package catalog_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// OversizedDocuments lists, on real MariaDB and on the MemCatalog twin, the
// documents of the fenced KBs whose content is longer than the read chain in
// bytes (not characters), largest first, bounded, with the full count.
func TestCatalogOversizedDocuments(t *testing.T) {
	db := testdb.New(t)
	const limit = protocol.ReadChainMaxBytes
	exact := strings.Repeat("a", limit)     // exactly the chain: not over
	oneOver := strings.Repeat("a", limit+1) // one byte over
	multi := strings.Repeat("知", limit/3+2) // fewer characters than the chain, more bytes
	db.Exec(t, `INSERT INTO bz_kb_docs (doc_id, kb_id, title, content, status, chunk_count, created_at, updated_at) VALUES
		(901, 'faq', 'At the chain', ?, 'ready', 1, '2026-01-01 00:00:00', '2026-01-01 00:00:00'),
		(902, 'faq', 'One over', ?, 'ready', 1, '2026-01-01 00:00:00', '2026-01-01 00:00:00'),
		(903, 'faq', 'Wide characters', ?, 'embedding', 0, '2026-01-01 00:00:00', '2026-01-01 00:00:00'),
		(904, 'other-kb', 'Outside the fence', ?, 'ready', 1, '2026-01-01 00:00:00', '2026-01-01 00:00:00')`,
		exact, oneOver, multi, oneOver)
	big := int64(len(testdb.BigDocContent()))
	want := []catalog.DocSize{
		{DocID: testdb.DocBig, KBID: testdb.KBManuals, Title: testdb.DocBigTitle, Bytes: big},
		{DocID: 903, KBID: "FAQ", Title: "Wide characters", Bytes: int64(len(multi))},
		{DocID: 902, KBID: "FAQ", Title: "One over", Bytes: int64(limit + 1)},
	}
	type lister interface {
		OversizedDocuments(context.Context, []string, int64, int) ([]catalog.DocSize, int, error)
	}
	reg := prometheus.NewRegistry()
	sqlCat := openSQL(t, db, reg)
	for _, c := range []struct {
		name string
		cat  lister
	}{{"sql", sqlCat}, {"mem", memFromDB(t, db)}} {
		ctx := context.Background()
		kbs := []string{"FAQ", testdb.KBManuals, testdb.KBMissing}
		got, n, err := c.cat.OversizedDocuments(ctx, kbs, limit, 10)
		if err != nil || n != 3 || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, %d, %v; want %+v, 3", c.name, got, n, err, want)
		}
		got, n, err = c.cat.OversizedDocuments(ctx, kbs, limit, 1)
		if err != nil || n != 3 || !reflect.DeepEqual(got, want[:1]) {
			t.Errorf("%s limit 1: got %+v, %d, %v; want %+v, 3", c.name, got, n, err, want[:1])
		}
		got, n, err = c.cat.OversizedDocuments(ctx, []string{testdb.KBDisabled}, limit, 10)
		if err != nil || n != 0 || len(got) != 0 {
			t.Errorf("%s small KB: got %+v, %d, %v; want none", c.name, got, n, err)
		}
	}
	if got := catalogQueries(t, reg, catalog.QueryOversized); got != 3 {
		t.Errorf("oversized_docs queries got %v; want 3 (one per call)", got)
	}
}
