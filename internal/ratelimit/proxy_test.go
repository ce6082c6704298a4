package ratelimit

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// faultProxy forwards TCP to a Redis server, with the network's faults on
// demand:
//   - hold, when it returns > 0 for a chunk a client sends, holds that
//     chunk (and what follows on its connection) that long before
//     forwarding it, as a stalled TCP connection would;
//   - swallow drops everything clients send from then on (a Redis that
//     stopped answering: a partition, a paused VM);
//   - dropReply, once set, lets Redis's next reply be read but never
//     delivered, and closes the connection: a reply lost on the network
//     after Redis ran the command.
type faultProxy struct {
	ln        net.Listener
	target    string
	hold      func([]byte) time.Duration
	swallow   atomic.Bool
	dropReply atomic.Bool
}

func newFaultProxy(t *testing.T, target string, hold func([]byte) time.Duration) *faultProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target, hold: hold}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *faultProxy) serve(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	go func() { // replies
		defer c.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				if p.dropReply.CompareAndSwap(true, false) {
					up.Close()
					return // the reply read, never delivered
				}
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 && !p.swallow.Load() {
			chunk := append([]byte(nil), buf[:n]...)
			if p.hold != nil {
				if d := p.hold(chunk); d > 0 {
					time.Sleep(d)
				}
			}
			up.Write(chunk)
		}
		if err != nil {
			time.Sleep(500 * time.Millisecond) // let Redis run what it was sent
			up.Close()
			return
		}
	}
}

// client is a client of the test's Redis database through the proxy.
func (p *faultProxy) client(t *testing.T) *redis.Client {
	opt, err := ClientOptions("redis://" + p.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	real, _ := ClientOptions(RedisURL(t))
	opt.DB = real.DB
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}
