// Command kube-proxy is the upstream kube-proxy (k8s.io/kubernetes/cmd/kube-proxy), built for
// the multi-node tier with the kubelet's module pins (go.mod here is a copy of
// ../../node/kubelet/go.mod), so it shares the Go build cache with the kubelet and the
// control plane: only the proxy's own packages compile on top of them.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metric registration
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric registration
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
