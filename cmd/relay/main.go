// Command relay moves order events from Kafka into MySQL exactly once.
//
// main only parses the command line, wires signals and calls run; the process exits in one place.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	os.Exit(exitCode(err))
}

// exitCode maps an error to the process status (exit.go): a usage error, a coded error's own
// status, exitError for anything else.
func exitCode(err error) int {
	var ue usageError
	var ce codedError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintln(os.Stderr, "relay:", err)
		fmt.Fprintln(os.Stderr, "run 'relay help' for usage")
		return exitUsage
	case errors.As(err, &ce):
		fmt.Fprintln(os.Stderr, "relay:", err)
		return ce.code
	default:
		fmt.Fprintln(os.Stderr, "relay:", err)
		return exitError
	}
}
