package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/examples/toolloop"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
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

// TestPythonExample runs the non-Go client example of docs/hosts.md
// (examples/python, standard library only) against the demo: the refund
// question finds the refund policy, reads it, and reads a same-run hint of
// an on_demand turn with the turn's run_id. Without python3 it skips, except
// with CI=true, where scripts/test.sh installs it and its absence fails.
func TestPythonExample(t *testing.T) {
	py, err := exec.LookPath("python3")
	testkit.RequireService(t, "python3 (scripts/test.sh installs it)", err)
	d := startSamples(t, nil)
	cmd := exec.Command(py, "../../examples/python/knowledge_client.py", "--url", d.base, "--route", demoRoute,
		"--token-file", writeTokenFile(t, d.token+"\n"), "--turn", "Can I get a refund?")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("example: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"search status: ok", "hint 1: Refund policy", "read: Refund policy: ", "same-run hint(s)", "turn hint 1: Refund policy: "} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, strings.Fields(d.content["Refund policy"])[3]) {
		t.Errorf("stdout does not show the document's text:\n%s", out)
	}
	// A workspace that is not rolled out is "unsupported", exit 1.
	cmd = exec.Command(py, "../../examples/python/knowledge_client.py", "--url", d.base, "--route", "not-rolled-out", "refund")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "BAILING_AGENT_TOKEN=" + d.token}
	stderr.Reset()
	cmd.Stderr = &stderr
	var ee *exec.ExitError
	if err := cmd.Run(); !errorsAs(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "does not support") {
		t.Errorf("not rolled out: %v, stderr %q; want exit 1 saying it does not support the protocol", err, stderr.String())
	}
}

// TestPythonExampleRules runs the example's unit tests
// (examples/python/test_knowledge_client.py): a capabilities answer with
// supported false is unsupported, a turn is assembled by its echoed mode and
// status (inline, unavailable, no block), and cached hints are dropped on a
// change of turn, account, authorization or route, a late answer ignored.
func TestPythonExampleRules(t *testing.T) {
	py, err := exec.LookPath("python3")
	testkit.RequireService(t, "python3 (scripts/test.sh installs it)", err)
	cmd := exec.Command(py, "../../examples/python/test_knowledge_client.py")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PYTHONDONTWRITEBYTECODE=1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python unit tests: got %v; want exit 0\n%s", err, out)
	}
}
