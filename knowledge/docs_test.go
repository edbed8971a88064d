package knowledge

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// TestDocsMentionEveryCode keeps docs/protocol.md and docs/openapi.yaml in
// step with the codes and limits this package answers with.
func TestDocsMentionEveryCode(t *testing.T) {
	var doc struct {
		OpenAPI string         `yaml:"openapi"`
		Paths   map[string]any `yaml:"paths"`
	}
	spec := readOpenAPI(t, &doc)
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
	codes := []protocol.ErrorCode{protocol.CodeInvalidRequest, protocol.CodeReferenceInvalid, protocol.CodeUnauthorized, protocol.CodeRouteNotAllowed,
		protocol.CodeRouteUnavailable, protocol.CodeRunNotFound, protocol.CodeRunNotActive, protocol.CodeScopeChanged, protocol.CodeKnowledgeChanged,
		protocol.CodeReferenceExpired, protocol.CodePayloadTooLarge, protocol.CodeRateLimited, protocol.CodeUnavailable,
		protocol.CodeTaskRequired, protocol.CodeTaskRecordInvalid, protocol.CodeTaskBindingConflict, protocol.CodeTaskRunInactive, protocol.CodeTaskMemberMismatch,
		protocol.CodeTaskScopeBlocked, protocol.CodeTaskPaused, protocol.CodeTaskCancelled, protocol.CodeTaskExpired, protocol.CodeTaskInvalidInput, protocol.CodeTaskUnavailable}
	words := []string{protocol.TaskMessage, protocol.SearchSchema, protocol.ReadSchema, protocol.CapabilitiesSchema,
		"131072", "32768", "16384", "4096"}
	for _, c := range codes {
		words = append(words, string(c))
	}
	for _, code := range words {
		for name, text := range map[string][]byte{"openapi.yaml": spec, "protocol.md": guide} {
			if !strings.Contains(string(text), code) {
				t.Errorf("%s does not mention %q", name, code)
			}
		}
	}
}

// TestOpenAPITokenSchemas: the Ref and Cursor schemas of docs/openapi.yaml
// accept the tokens this package seals, the longest included, and refuse
// version 1 tokens.
func TestOpenAPITokenSchemas(t *testing.T) {
	type schema struct {
		Pattern   string `yaml:"pattern"`
		MaxLength int    `yaml:"maxLength"`
	}
	var doc struct {
		Components struct {
			Schemas struct {
				Ref    schema `yaml:"Ref"`
				Cursor schema `yaml:"Cursor"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	readOpenAPI(t, &doc)
	k := mustKeyring(t, strings.Repeat("Z", maxKeyIDLen)+":"+secret('w'), "")
	c := sampleClaims()
	c.KBID = strings.Repeat("k", maxKBIDLen)
	ref, _ := k.SealRef(c)
	cur, _ := k.SealCursor(CursorClaims{Expiry: t0, RefDigest: RefDigest(ref)})
	for name, tc := range map[string]struct {
		s        schema
		tok, old string
	}{
		"Ref":    {doc.Components.Schemas.Ref, ref, sealV1Ref([]byte("server-token"), "core", c)},
		"Cursor": {doc.Components.Schemas.Cursor, cur, "kc1." + cur[len(CursorPrefix):]},
	} {
		re, err := regexp.Compile(tc.s.Pattern)
		if err != nil || tc.s.MaxLength != protocol.MaxTokenBytes {
			t.Fatalf("%s: pattern %q (%v), maxLength %d; want a valid pattern and %d", name, tc.s.Pattern, err, tc.s.MaxLength, protocol.MaxTokenBytes)
		}
		if !re.MatchString(tc.tok) || len(tc.tok) > tc.s.MaxLength {
			t.Errorf("%s: sealed token %q (%d bytes) does not match the schema", name, tc.tok, len(tc.tok))
		}
		if re.MatchString(tc.old) {
			t.Errorf("%s: version 1 token %q matches the schema; want refused", name, tc.old)
		}
	}
}

// readOpenAPI decodes docs/openapi.yaml into doc and returns its bytes.
func readOpenAPI(t *testing.T, doc any) []byte {
	t.Helper()
	spec, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(spec, doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	return spec
}
