// Command multicache keeps one live, indexed cache of a fleet of Kubernetes clusters.
package main

import (
	"fmt"
	"os"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "v0.1.0-dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "version" {
		fmt.Println("multicache", version)
		return
	}
	fmt.Fprintln(os.Stderr, "usage: multicache version")
	os.Exit(2)
}
