package fleet

import (
	"net"
	"strconv"
	"testing"
)

func TestFreePortsBelowEphemeralRange(t *testing.T) {
	hi := ephemeralStart()
	if hi-lowestPort < 1000 {
		t.Skipf("ephemeral range starts at %d: ports come from the kernel", hi)
	}
	ports, err := FreePorts(50)
	if err != nil {
		t.Fatal(err)
	}
	more, err := FreePorts(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range append(ports, more...) {
		if p < lowestPort || p >= hi {
			t.Errorf("port %d outside [%d, %d)", p, lowestPort, hi)
		}
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d: %v", p, err)
			continue
		}
		l.Close()
	}
}
