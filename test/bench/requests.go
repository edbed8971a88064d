package main

// The requests the sections send to check a target and to set up the
// search and read loads.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

func check(ep *endpoint, rq reqSpec) error {
	resp, err := ep.client.Get(ep.base + rq.path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe answered %d", resp.StatusCode)
	}
	return nil
}

// catalogDSN is the read-only DSN of the bench's catalog database ("" with
// the in-memory catalog).
var catalogDSN string

// searchBody is the search load's request; with --managed it carries the
// managed task's run (runID), which reads carry too.
var (
	searchBody = []byte(`{"query":` + strconv.Quote(searchQuery) + `,"limit":3}`)
	runID      string
)

// searchRef searches once through the sidecar and returns the first hint's
// ref, for the read load.
func searchRef(ep *endpoint, h http.Header) (string, error) {
	req, _ := http.NewRequest(http.MethodPost, ep.base+"/agent-api/v1/workspaces/"+routeKB+"/knowledge/search", bytes.NewReader(searchBody))
	req.Header = h.Clone()
	resp, err := ep.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var body struct {
		Hints []struct {
			Ref string `json:"ref"`
		} `json:"hints"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil || len(body.Hints) == 0 {
		return "", fmt.Errorf("search through the sidecar answered %d without hints", resp.StatusCode)
	}
	return body.Hints[0].Ref, nil
}

// turnBodies makes turn requests with unique ids, as a host sends them.
type turnBodies struct{ prefix string }

func newTurnBodies() *turnBodies {
	return &turnBodies{prefix: strconv.FormatInt(time.Now().UnixNano(), 36)}
}

func (t *turnBodies) next(seq uint64) []byte {
	id := t.prefix + "-" + strconv.FormatUint(seq, 36)
	return []byte(`{"client_conversation_id":"c-` + id + `","client_turn_id":"t-` + id + `","user_message_id":"m-` + id +
		`","user_input":"Can I get a refund after the window closed?","knowledge_delivery":"on_demand","page_context":{"url":"/orders"},"renderers":["markdown"]}`)
}
