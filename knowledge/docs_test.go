package knowledge

import (
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestDocsMentionEveryCode keeps docs/protocol.md and docs/openapi.yaml in
// step with the codes and limits this package answers with.
func TestDocsMentionEveryCode(t *testing.T) {
	spec, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string         `yaml:"openapi"`
		Paths   map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(spec, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q; want 3.1.0", doc.OpenAPI)
	}
	for _, ep := range []string{"capabilities", "search", "read"} {
		if _, ok := doc.Paths["/agent-api/v1/workspaces/{route}/knowledge/"+ep]; !ok {
			t.Errorf("openapi.yaml does not describe the %s endpoint", ep)
		}
	}
	guide, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []string{CodeInvalidRequest, CodeReferenceInvalid, CodeUnauthorized, CodeRouteNotAllowed,
		CodeRouteUnavailable, CodeRunNotFound, CodeRunNotActive, CodeScopeChanged, CodeKnowledgeChanged,
		CodeReferenceExpired, CodePayloadTooLarge, CodeRateLimited, CodeUnavailable,
		"bailing.agent-knowledge-search.v1", "bailing.agent-knowledge-read.v1", "bailing.agent-knowledge-capabilities.v1",
		"131072", "32768", "16384", "4096"} {
		for name, text := range map[string][]byte{"openapi.yaml": spec, "protocol.md": guide} {
			if !strings.Contains(string(text), code) {
				t.Errorf("%s does not mention %q", name, code)
			}
		}
	}
}
