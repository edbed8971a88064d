package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// Build wires a configuration into a running sidecar, as `serve` does. Here
// it stands before the Core double, with the in-memory catalog in place of
// Core's database, and a host searches one workspace and reads the hint it
// got, page by page, through the sidecar.
func ExampleBuild() {
	const (
		service = "svc_example-service-token"
		bearer  = "bha_ZXhhbXBsZS1hY2Nlc3MtdG9rZW4tZm9yLXRoZS1leGFtcGxl"
		route   = "orders"
		kb      = "kb-orders"
	)
	core := fakecore.New(fakecore.Options{ServiceToken: service})
	defer core.Close()
	cat := catalog.NewMemCatalog()
	core.AddKB(kb)
	cat.PutKB(kb, true)
	cat.PutRoute(route, true, `{"kb_ids":["kb-orders"],"top_k":8,"min_score":0.05,"inject":"chunk","max_docs":4}`)
	cat.PutClient("example-host", true, []string{route}, "https://host.example/consent")
	core.SetRoute(route, fakecore.GateAllowed)
	const text = "Refunds are paid within 14 days of the return being received."
	core.AddDoc(kb, 1, "Refund policy", text)
	cat.PutDoc(corefacts.Document{
		DocMeta: corefacts.DocMeta{DocID: 1, KBID: kb, Title: "Refund policy", Status: "ready", UpdatedAt: time.Now().UTC()},
		Content: text,
	})
	core.AddSession(bearer, corefacts.Session{SessionID: "6f1c2f7e-5a53-4d52-9a0e-3f3b5f0c9d11", ClientAppID: "example-host",
		Principal: corefacts.Principal{ID: "u1", Tenant: "t1", Roles: []string{"agent"}}, AllowedRoutes: []string{route}})
	coreSrv := httptest.NewServer(core)
	defer coreSrv.Close()

	cfg := config.Defaults()
	cfg.Core.URL, cfg.Core.Token = coreSrv.URL, service
	cfg.Rollout = "allow:" + route
	app, err := sidecar.Build(context.Background(), cfg, sidecar.Deps{Catalog: cat, SingleProcess: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer app.Close()
	front := httptest.NewServer(app.Server.Handler())
	defer front.Close()

	host, _ := hostclient.New(front.URL, route, bearer, nil)
	res, err := host.Call(context.Background(), "search", []byte(`{"query":"when are refunds paid"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	var found hostclient.SearchAnswer
	_ = json.Unmarshal(res.Body, &found)
	if len(found.Hints) == 0 {
		fmt.Println(res.Status, string(res.Body)) // an error body
		return
	}
	fmt.Println(res.Status, len(found.Hints), found.Hints[0].Title)

	res, _ = host.Call(context.Background(), "read", []byte(`{"ref":"`+found.Hints[0].Ref+`"}`))
	var page hostclient.ReadAnswer
	_ = json.Unmarshal(res.Body, &page)
	fmt.Println(res.Status, page.TotalContentBytes, page.NextCursor == nil)
	// Output:
	// 200 1 Refund policy
	// 200 61 true
}
