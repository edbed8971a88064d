// Command toolloop answers one question with the example tool loop:
//
//	BAILING_AGENT_TOKEN=… go run ./examples/toolloop/cmd/toolloop --url http://127.0.0.1:8080 --route demo "Can I get a refund?"
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/bailinghub/knowledge-sidecar/examples/toolloop"
)

func main() { os.Exit(run()) }

func run() int {
	base := flag.String("url", "http://127.0.0.1:8080", "Agent API base URL")
	route := flag.String("route", "demo", "workspace (route) key")
	flag.Parse()
	question := strings.Join(flag.Args(), " ")
	if question == "" {
		fmt.Fprintln(os.Stderr, "usage: toolloop [--url URL] [--route ROUTE] QUESTION (token from BAILING_AGENT_TOKEN)")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := &toolloop.Host{BaseURL: *base, Route: *route, Token: os.Getenv("BAILING_AGENT_TOKEN")}
	if err := h.Negotiate(ctx); err != nil {
		if errors.Is(err, toolloop.ErrUnsupported) {
			fmt.Fprintln(os.Stderr, "this workspace keeps inline knowledge:", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "toolloop:", err)
		return 1
	}
	answer, err := h.Answer(ctx, toolloop.ScriptedModel{}, question)
	if err != nil {
		fmt.Fprintln(os.Stderr, "toolloop:", err)
		return 1
	}
	fmt.Println(answer)
	return 0
}
