package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bailinghub/knowledge-sidecar/ledger"
)

func ExampleMemory() {
	l := ledger.NewMemory(10_000, time.Hour, time.Now)
	defer l.Close()
	ctx := context.Background()
	k := ledger.Key{SessionID: "s-1", Route: "order-assistant", ConversationID: "c-1", TurnID: "turn-1", UserMessageID: "msg-1"}

	first, err := l.Reserve(ctx, k, "on_demand")
	fmt.Println(first.Created, err)
	again, err := l.Reserve(ctx, k, "on_demand") // a retry after a lost response
	fmt.Println(again.Created, err)
	_, err = l.Reserve(ctx, k, "inline") // the same turn, another mode
	fmt.Println(errors.Is(err, ledger.ErrConflict))
	// Output:
	// true <nil>
	// false <nil>
	// true
}
