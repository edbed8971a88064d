package rollout_test

import (
	"fmt"

	"github.com/bailinghub/knowledge-sidecar/rollout"
)

func ExampleParse() {
	p, err := rollout.Parse(" deny: hr-bot , finance ")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Mode(), p.String())
	fmt.Println(p.Enabled("order-assistant"), p.Enabled("hr-bot"))

	_, err = rollout.Parse("percent:150")
	fmt.Println(err)
	// Output:
	// deny deny:finance,hr-bot
	// true false
	// rollout: percent: 150 is out of range 0-100
}
