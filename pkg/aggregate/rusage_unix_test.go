//go:build unix

package aggregate

import (
	"syscall"
	"time"
)

// rusage is what getrusage counts for the whole process.
type rusage struct {
	ivcsw, minflt int64
	cpu           time.Duration // user and system
}

func readRusage() rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return rusage{}
	}
	return rusage{ivcsw: int64(ru.Nivcsw), minflt: int64(ru.Minflt), cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
}
