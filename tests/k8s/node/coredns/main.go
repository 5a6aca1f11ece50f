// Command coredns is upstream CoreDNS (github.com/coredns/coredns) with only the plugins
// the real-node test tier's Corefile uses: the cluster DNS for headless Services. Fewer
// plugins than upstream's main means a much smaller compile (no cloud DNS SDKs).
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
