package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"

	"github.com/bailinghub/knowledge-sidecar/proxy"
)

// Without Features the edge is a pure pass-through reverse proxy: every
// request reaches Core as sent, and Core's answer comes back byte for byte
// (sidecar.Build adds the knowledge endpoints and turn interception).
func ExampleNew() {
	core := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Core", "legacy")
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
	}))
	defer core.Close()
	coreURL, _ := url.Parse(core.URL)

	edge, err := proxy.New(proxy.Options{CoreURL: coreURL})
	if err != nil {
		fmt.Println(err)
		return
	}
	front := httptest.NewServer(edge.Handler())
	defer front.Close()

	res, err := http.Get(front.URL + "/agent-api/v1/workspaces/orders/runs")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Println(res.StatusCode, res.Header.Get("X-Core"), string(body))
	// Output:
	// 200 legacy GET /agent-api/v1/workspaces/orders/runs
}
