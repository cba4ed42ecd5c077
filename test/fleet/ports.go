package fleet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Ports for the local fleet's servers are chosen below the kernel's ephemeral range.
//
// A port the kernel hands out for 127.0.0.1:0 lies inside that range, and so does the source
// port of every outgoing connection on the machine. Between choosing such a port and the
// server binding it (etcd takes a second or more to start before kube-apiserver binds), an API
// server's own connection to etcd, or any other test's, could take it: CI saw kube-apiserver
// fail with "bind: address already in use". Below the range only an explicit bind can collide,
// and a collision with another test's choice is retried by the caller.
const (
	lowestPort = 10000
	// fallbackEphemeralLow is Linux's default start of net.ipv4.ip_local_port_range.
	fallbackEphemeralLow = 32768
)

var (
	ephemeralOnce sync.Once
	ephemeralLow  int

	// taken holds every port this process has handed out, so that two callers in one process
	// never get the same one even before either binds it.
	takenMu sync.Mutex
	taken   = map[int]bool{}
)

// ephemeralStart reads the first port of the kernel's ephemeral range.
func ephemeralStart() int {
	ephemeralOnce.Do(func() {
		ephemeralLow = fallbackEphemeralLow
		b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
		if err != nil {
			return
		}
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 0 {
				ephemeralLow = n
			}
		}
	})
	return ephemeralLow
}

// FreePorts returns n distinct ports on 127.0.0.1 that were free when asked, chosen below the
// kernel's ephemeral range when it leaves room (at least 1000 ports from 10000), and then never
// twice in one process; else the kernel chooses them.
func FreePorts(n int) ([]int, error) {
	hi := ephemeralStart()
	if hi-lowestPort < 1000 {
		return kernelPorts(n)
	}
	takenMu.Lock()
	defer takenMu.Unlock()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("no free port in [%d, %d) after %d tries", lowestPort, hi, tries)
		}
		p := lowestPort + rand.IntN(hi-lowestPort)
		if taken[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		taken[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

// FreeAddr returns one free 127.0.0.1:port, as FreePorts chooses it.
func FreeAddr() (string, error) {
	p, err := FreePorts(1)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p[0])), nil
}

// kernelPorts asks the kernel for n distinct ports, holding each listener until all are chosen.
func kernelPorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// addrInUse reports whether a server's log says its listener could not bind.
func addrInUse(err error) bool {
	return err != nil && strings.Contains(err.Error(), "address already in use")
}
