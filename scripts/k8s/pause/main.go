// Command pause is the pod sandbox process of berth's test cluster, built
// here because the usual image (registry.k8s.io/pause) lives on a registry
// the test machines cannot reach. As PID 1 of a pod's shared process
// namespace it reaps orphaned children, and it exits on SIGTERM or SIGINT,
// which is all a sandbox container has to do.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	child := make(chan os.Signal, 16)
	signal.Notify(child, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-child:
			for {
				var ws syscall.WaitStatus
				if pid, _ := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 {
					break
				}
			}
		}
	}
}
