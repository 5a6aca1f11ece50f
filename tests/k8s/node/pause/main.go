// Command pause is the sandbox ("pause") container of the real-node test tier's pods: no
// registry is reachable, so the image is built locally from this. It holds the pod's
// namespaces, reaps orphaned children (it is PID 1 of the pod when the PID namespace is
// shared) and exits at once on SIGTERM/SIGINT, so a pod stops without waiting for SIGKILL.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
