package jsstring

import "strconv"

// CheckQuery applies the rules of a search query (SPEC §4) to q: not empty
// after JavaScript's trim(), at most maxUnits UTF-16 code units, no C0
// control character but tab, LF and CR. It returns "" or the sentence of the
// 400 invalid_request refusal. Core counts and trims like JavaScript, so a
// query a native Core accepts is accepted here and vice versa. The knowledge
// service (knowledge.CheckQuery) and the MCP tools (mcpserver, before
// sending) both call it, so a tool refuses exactly what the endpoint
// refuses, with the same message (a JSON Schema maxLength counts code
// points and cannot say this).
func CheckQuery(q string, maxUnits int) string {
	if Trim(q) == "" {
		return "query must not be empty."
	}
	if UTF16Len(q) > maxUnits {
		return "query must not exceed " + strconv.Itoa(maxUnits) + " characters counted in UTF-16 code units (an emoji counts 2)."
	}
	for _, c := range q {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
			return "query contains disallowed control characters."
		}
	}
	return ""
}
