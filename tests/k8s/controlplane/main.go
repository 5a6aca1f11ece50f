// Command controlplane is a multi-call binary for the airflow-tfk integration tests.
//
// It embeds the real upstream Kubernetes components from the k8s.io/kubernetes module
// and an embedded etcd server from go.etcd.io/etcd/server/v3, so one compile shares the
// common packages. It dispatches on the base name of argv[0] (so symlinks named
// kube-apiserver, etc. work) or else on the first argument:
//
//	controlplane etcd --data-dir DIR --listen-client-urls URL --listen-peer-urls URL
//	controlplane kube-apiserver [kube-apiserver flags]
//	controlplane kube-controller-manager [kube-controller-manager flags]
//	controlplane kube-scheduler [kube-scheduler flags]
//	controlplane version
package main

import (
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // CronJob time zones, as upstream's binaries do

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go prometheus plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric registration
	"k8s.io/component-base/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: controlplane {etcd|kube-apiserver|kube-controller-manager|kube-scheduler|version} [flags]")
	os.Exit(2)
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	switch name {
	case "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler":
	default:
		if len(args) == 0 {
			usage()
		}
		name, args = args[0], args[1:]
	}
	// cobra reads os.Args[1:] by default; make the component see only its own flags.
	os.Args = append([]string{name}, args...)

	switch name {
	case "etcd":
		os.Exit(runEtcd(args))
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "version":
		fmt.Println(version.Get().GitVersion)
	default:
		usage()
	}
}
