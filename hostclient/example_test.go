package hostclient_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
)

// A host calls one workspace's knowledge endpoints: Call posts the body with
// the host's bearer, and a refused call's protocol error is read with
// ErrorCode. The server here stands in for any implementation of the
// protocol (the sidecar or a native Core).
func ExampleClient_Call() {
	impl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer bha_host-token" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"unauthorized","message":"The bearer is missing or not valid."}`))
			return
		}
		_, _ = w.Write([]byte(`{"schema_version":"bailing.agent-knowledge-search.v1","route":"orders","status":"ok",` +
			`"hints":[{"ref":"r1","title":"Refund policy","summary":"Refunds are paid within 14 days.","score":0.82}],"truncated":false}`))
	}))
	defer impl.Close()

	host, err := hostclient.New(impl.URL, "orders", "bha_host-token", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := host.Call(context.Background(), hostclient.Search, []byte(`{"query":"refunds"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	var answer hostclient.SearchAnswer
	_ = json.Unmarshal(res.Body, &answer)
	fmt.Println(res.Status, answer.Hints[0].Title)

	stranger, _ := hostclient.New(impl.URL, "orders", "bha_someone-else", nil)
	res, _ = stranger.Call(context.Background(), hostclient.Search, []byte(`{"query":"refunds"}`))
	refused, _ := res.ErrorCode()
	fmt.Println(res.Status, refused.Error)
	// Output:
	// 200 Refund policy
	// 401 unauthorized
}
