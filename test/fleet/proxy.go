package fleet

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy is a loopback TCP proxy in front of one API server, for network faults. It forwards
// bytes untouched (TLS passes through), so clients keep verifying the real serving certificate.
//
// While stalled, connections stay open but no byte moves in either direction, new connections
// included: a client sees a hung peer, not an error. Drop closes every open connection at once.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	cond    *sync.Cond
	stalled bool
	closed  bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup

	sent, received atomic.Int64 // bytes forwarded to the target, and back to clients
}

// NewProxy listens on a free 127.0.0.1 port and forwards to target (host:port).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is https://Addr, to use as a rest.Config Host.
func (p *Proxy) URL() string { return "https://" + p.Addr() }

// Stall stops all traffic until Resume.
func (p *Proxy) Stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

// Resume lets traffic flow again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.stalled = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Drop closes every open connection. New connections are accepted as usual.
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Conns is the number of open connections (both legs count once).
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// Bytes is how many bytes the proxy has forwarded so far: from clients to the target (sent)
// and from the target back to clients (received). For TLS targets these are the encrypted
// bytes, as on the wire.
func (p *Proxy) Bytes() (sent, received int64) { return p.sent.Load(), p.received.Load() }

// Close stops listening, closes every connection and waits for the forwarding goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			in.Close()
			out.Close()
			return
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(out, in, &p.sent)
		go p.pipe(in, out, &p.received)
	}
}

// pipe copies src to dst, adding what it writes to count, waiting at every chunk while the
// proxy is stalled.
func (p *Proxy) pipe(dst, src net.Conn, count *atomic.Int64) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
		src.Close()
		dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitFlowing() {
				return
			}
			w, werr := dst.Write(buf[:n])
			count.Add(int64(w))
			if werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}

// waitFlowing blocks while stalled; false once the proxy is closed.
func (p *Proxy) waitFlowing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.stalled && !p.closed {
		p.cond.Wait()
	}
	return !p.closed
}
