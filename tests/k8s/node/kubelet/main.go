// Command kubelet is the upstream kubelet (k8s.io/kubernetes/cmd/kubelet), built for the
// real-node test tier with the control plane's module pins (go.mod here starts as a copy of
// ../../controlplane/go.mod), so both builds select the same package versions and share the
// Go build cache: only the kubelet-only packages compile on top of the control plane.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metric registration
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric registration
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
