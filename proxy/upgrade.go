package proxy

import (
	"bytes"
	"io"

	"github.com/labstack/echo/v4"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// A flip keeps sessions whole (SPEC §8.2, docs/rollout.md "Upgrading Core
// to a native version"): after the Core turns native, a read whose ref and
// cursor the sidecar issued is still served by the sidecar until they
// expire, since a native Core cannot open them; every other read, and every
// search, goes to the native Core untouched. The other way round (a
// rollback) needs nothing here: the sidecar serves every read again, and a
// native Core's ref fails its check as any foreign ref does (400
// knowledge_reference_invalid, "search again").

// readAfterFlip handles a read the rollout decision passed through: when
// the workspace is rolled out, the Core is native and the body continues a
// chain the sidecar issued (knowledge.Service.IssuedHere), the sidecar
// answers it; otherwise the request passes through with its body replayed
// byte for byte. The body is read under the knowledge endpoints' limit
// only as far as deciding needs: a larger one is Core's to judge, whole.
func (s *Server) readAfterFlip(c echo.Context, key corefacts.RouteKey) error {
	r := c.Request()
	if key.IsZero() || !s.feat.rollout.Load().Enabled(c.Param("route")) || !s.feat.native.IsNative() {
		return s.passH(c)
	}
	head, err := io.ReadAll(io.LimitReader(r.Body, protocol.MaxRequestBytes+1))
	if err != nil {
		return errBodyUnreadable
	}
	if len(head) <= protocol.MaxRequestBytes && s.feat.k.IssuedHere(head) {
		buf := answerBuffers.Get().(*[]byte)
		defer answerBuffers.Put(buf)
		body, err := s.feat.k.ReadInto(r.Context(), *buf, r.Header.Get("Authorization"), key, bytes.NewReader(head))
		return reply(c, body, err)
	}
	r.Body = replayBody{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	return s.passH(c)
}

// replayBody is a request body whose first bytes were read to peek at it:
// they are read again, then the rest; Close closes the original.
type replayBody struct {
	io.Reader
	orig io.ReadCloser
}

func (b replayBody) Close() error { return b.orig.Close() }
