// FaultProxy: a TCP proxy on loopback that breaks connections the way networks do.
//
// Invariant: bytes pass through unchanged and in order unless a fault is applied to their link.
// A reset closes both sides with an RST (SO_LINGER 0), as a middlebox or a dying peer does. A
// blackhole stops moving bytes in both directions without closing anything, as a partition or a
// vanished host does: each end sees a silent peer, the server keeps its session; when the
// blackhole ends (if it does), what was sent meanwhile arrives, as TCP retransmission would
// deliver it, including a close.

package testenv

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// FaultProxy forwards connections from its own address to a target.
type FaultProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	links  map[*Link]bool
	closed bool
	// holdUntil blackholes the links accepted before it too (BlackholeHost).
	holdUntil time.Time
}

// Link is one proxied connection: the client's side and the server's side.
type Link struct {
	client, server net.Conn
	mu             sync.Mutex
	cond           *sync.Cond
	holdUntil      time.Time // blackholed until then
	p              *FaultProxy
}

// Forever is a blackhole that outlasts the test.
const Forever = 24 * time.Hour

// NewFaultProxy listens on 127.0.0.1 and forwards to target until the test ends.
func NewFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	return NewFaultProxyAt(t, "127.0.0.1:0", target)
}

// NewFaultProxyAt is NewFaultProxy listening on addr: a service that comes up where a client was
// told it would be (FreeAddr).
func NewFaultProxyAt(t testing.TB, addr, target string) *FaultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &FaultProxy{ln: ln, target: target, links: map[*Link]bool{}}
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// FreeAddr is a loopback host:port where nothing listens: a client dialling it is refused until
// something listens there (NewFaultProxyAt). The port is drawn below Linux's ephemeral range
// (32768 and up), so no outgoing connection takes it as its own port meanwhile, which would keep
// the listener from binding it later.
func FreeAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+rand.N(12000))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		if err := ln.Close(); err != nil {
			t.Fatal(err)
		}
		return addr
	}
	t.Fatal("no free port in 20000..31999")
	return ""
}

// Addr is the proxy's host:port.
func (p *FaultProxy) Addr() string { return p.ln.Addr().String() }

func (p *FaultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &Link{client: c, server: s, p: p}
		l.cond = sync.NewCond(&l.mu)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.links[l] = true
		l.holdUntil = p.holdUntil
		p.mu.Unlock()
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); l.pump(s, c) }()
		go func() { defer wg.Done(); l.pump(c, s) }()
		go func() {
			wg.Wait()
			p.mu.Lock()
			delete(p.links, l)
			p.mu.Unlock()
		}()
	}
}

// pump copies src to dst, holding bytes while the link is blackholed. The end of src ends dst's
// writing side, so a close travels through like any byte.
func (l *Link) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		l.wait()
		n, err := src.Read(buf)
		if n > 0 {
			l.wait()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				return
			}
		}
		if err != nil {
			l.wait()
			if tc, ok := dst.(*net.TCPConn); ok && errors.Is(err, io.EOF) {
				_ = tc.CloseWrite()
			} else {
				_ = dst.Close()
			}
			return
		}
	}
}

// wait blocks while the link is blackholed.
func (l *Link) wait() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		d := time.Until(l.holdUntil)
		if d <= 0 {
			return
		}
		t := time.AfterFunc(d, func() {
			l.mu.Lock()
			l.cond.Broadcast()
			l.mu.Unlock()
		})
		l.cond.Wait()
		t.Stop()
	}
}

// ServerPort is the local port of the link's connection to the server: the server's process list
// shows it in HOST, which tells a test which session the link carries.
func (l *Link) ServerPort() int { return l.server.LocalAddr().(*net.TCPAddr).Port }

// Blackhole stops the link's traffic for d.
func (l *Link) Blackhole(d time.Duration) {
	l.mu.Lock()
	l.holdUntil = time.Now().Add(d)
	l.mu.Unlock()
}

// Reset closes both sides of the link with an RST.
func (l *Link) Reset() {
	for _, c := range []net.Conn{l.client, l.server} {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
	l.mu.Lock()
	l.holdUntil = time.Time{}
	l.cond.Broadcast()
	l.mu.Unlock()
}

// Links lists the open links.
func (p *FaultProxy) Links() []*Link {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*Link, 0, len(p.links))
	for l := range p.links {
		out = append(out, l)
	}
	return out
}

// BlackholeAll blackholes every open link for d and returns how many there were.
func (p *FaultProxy) BlackholeAll(d time.Duration) int {
	ls := p.Links()
	for _, l := range ls {
		l.Blackhole(d)
	}
	return len(ls)
}

// BlackholeHost makes the target a vanished host for d: every open link is blackholed, and so is
// every link accepted meanwhile (a client's connect succeeds, then nothing answers), until d ends.
func (p *FaultProxy) BlackholeHost(d time.Duration) {
	p.mu.Lock()
	p.holdUntil = time.Now().Add(d)
	p.mu.Unlock()
	p.BlackholeAll(d)
}

// Close stops accepting and resets every link.
func (p *FaultProxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, l := range p.Links() {
		l.Reset()
	}
}
