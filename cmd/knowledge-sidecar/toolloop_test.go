package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/examples/toolloop"
)

// TestToolLoopExample runs the example host loop of docs/hosts.md against
// the demo: negotiation outcomes and a full search → read → answer loop.
func TestToolLoopExample(t *testing.T) {
	d := startSamples(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	h := &toolloop.Host{BaseURL: d.base, Route: demoRoute, Token: d.token, HTTP: d.client}
	if err := h.Negotiate(ctx); err != nil {
		t.Fatalf("Negotiate: %v; want supported", err)
	}
	answer, err := h.Answer(ctx, toolloop.ScriptedModel{}, "What happens if the refund window is set to 0?")
	if err != nil || !strings.HasPrefix(answer, `According to "Refund policy"`) || !strings.Contains(answer, strings.Fields(d.content["Refund policy"])[1]) {
		t.Errorf("answer %q, %v; want one quoting the refund policy", answer, err)
	}
	// The question of docs/hosts.md's walkthrough: stop-words do not rank.
	if answer, err := h.Answer(ctx, toolloop.ScriptedModel{}, "Can I get a refund?"); err != nil || !strings.HasPrefix(answer, `According to "Refund policy"`) {
		t.Errorf("answer %q, %v; want one from the refund policy", answer, err)
	}

	other := &toolloop.Host{BaseURL: d.base, Route: "not-rolled-out", Token: d.token, HTTP: d.client}
	if err := other.Negotiate(ctx); !errors.Is(err, toolloop.ErrUnsupported) {
		t.Errorf("a workspace not rolled out: got %v; want ErrUnsupported", err)
	}
	wrong := &toolloop.Host{BaseURL: d.base, Route: demoRoute, Token: randomToken("bha_"), HTTP: d.client}
	if err := wrong.Negotiate(ctx); err == nil || errors.Is(err, toolloop.ErrUnsupported) || !strings.Contains(err.Error(), "401") {
		t.Errorf("a rejected token: got %v; want a 401 error, not \"unsupported\"", err)
	}
	answer, err = wrong.Answer(ctx, toolloop.ScriptedModel{}, "refund")
	if err != nil || !strings.Contains(answer, "could not consult") || !strings.Contains(answer, "unauthorized") {
		t.Errorf("answer %q, %v; want the model told why knowledge failed", answer, err)
	}
}
