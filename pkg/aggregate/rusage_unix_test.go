//go:build unix

package aggregate

import "syscall"

// rusage is what getrusage counts for the whole process.
type rusage struct{ ivcsw, minflt int64 }

func readRusage() rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return rusage{}
	}
	return rusage{ivcsw: int64(ru.Nivcsw), minflt: int64(ru.Minflt)}
}
