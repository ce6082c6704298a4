package notify

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeDNS is a DNS server in the test process: resolver returns a
// *net.Resolver (the pure-Go one) whose every query is answered from
// hosts over an in-memory pipe, so that no lookup leaves the machine. (The
// Go resolver still reads /etc/hosts first, a local file.)
type fakeDNS struct {
	mu    sync.Mutex
	hosts map[string][]netip.Addr // lower-case names without a final dot
}

func newFakeDNS() *fakeDNS { return &fakeDNS{hosts: map[string][]netip.Addr{}} }

// set makes host resolve to addrs (none: the name exists but has no
// address).
func (f *fakeDNS) set(host string, addrs ...string) *fakeDNS {
	as := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		as[i] = netip.MustParseAddr(a)
	}
	f.mu.Lock()
	f.hosts[normName(host)] = as
	f.mu.Unlock()
	return f
}

// lookup returns what host resolves to, and whether it exists.
func (f *fakeDNS) lookup(host string) ([]netip.Addr, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	as, ok := f.hosts[normName(host)]
	return as, ok
}

func normName(host string) string { return strings.ToLower(strings.TrimSuffix(host, ".")) }

func (f *fakeDNS) resolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			client, server := net.Pipe()
			go f.serve(server)
			return client, nil
		},
	}
}

// serve answers the queries of one connection, framed as over TCP (the Go
// resolver does so on a net.Conn that is not a net.PacketConn).
func (f *fakeDNS) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		resp := f.answer(q)
		if resp == nil {
			return
		}
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(resp))), resp...)); err != nil {
			return
		}
	}
}

// answer builds the response to query q: the A or AAAA records of the name
// asked, or NXDOMAIN for a name not in hosts.
func (f *fakeDNS) answer(q []byte) []byte {
	if len(q) < 12 {
		return nil
	}
	i := 12
	var labels []string
	for {
		if i >= len(q) {
			return nil
		}
		n := int(q[i])
		i++
		if n == 0 {
			break
		}
		if n&0xC0 != 0 || i+n > len(q) {
			return nil
		}
		labels = append(labels, string(q[i:i+n]))
		i += n
	}
	if i+4 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i:])
	question := q[12 : i+4]

	addrs, ok := f.lookup(strings.Join(labels, "."))
	var rcode byte
	if !ok {
		rcode = 3 // NXDOMAIN
	}
	var answers []byte
	count := 0
	for _, a := range addrs {
		var rdata []byte
		switch {
		case qtype == 1 && a.Is4():
			b := a.As4()
			rdata = b[:]
		case qtype == 28 && a.Is6():
			b := a.As16()
			rdata = b[:]
		default:
			continue
		}
		answers = append(answers, 0xC0, 12) // the question's name
		answers = binary.BigEndian.AppendUint16(answers, qtype)
		answers = binary.BigEndian.AppendUint16(answers, 1) // IN
		answers = binary.BigEndian.AppendUint32(answers, 60)
		answers = binary.BigEndian.AppendUint16(answers, uint16(len(rdata)))
		answers = append(answers, rdata...)
		count++
	}
	resp := []byte{
		q[0], q[1], // id
		0x80 | 0x04 | q[2]&0x01, // QR, AA, RD as asked
		0x80 | rcode,            // RA, rcode
		0, 1,                    // one question
		0, byte(count), // answers
		0, 0, // authority
		0, 0, // additional
	}
	resp = append(resp, question...)
	return append(resp, answers...)
}

func TestFakeDNS(t *testing.T) {
	dns := newFakeDNS().set("both.test", "8.8.8.8", "2606:4700:4700::1111").set("empty.test")
	r := dns.resolver()
	ctx := context.Background()
	got, err := r.LookupNetIP(ctx, "ip", "both.test")
	if err != nil || len(got) != 2 {
		t.Fatalf("both.test: %v, %v", got, err)
	}
	if _, err := r.LookupNetIP(ctx, "ip", "absent.test"); err == nil {
		t.Fatal("absent.test resolved")
	} else if de := (*net.DNSError)(nil); !errors.As(err, &de) || !de.IsNotFound {
		t.Fatalf("absent.test: %v, want not found", err)
	}
	if got, err := r.LookupNetIP(ctx, "ip", "empty.test"); err == nil {
		t.Fatalf("empty.test resolved to %v", got)
	}
}

func TestForbiddenReason(t *testing.T) {
	const (
		loopback  = "a loopback address"
		private   = "a private address"
		linkLocal = "a link-local address"
		multicast = "a multicast address"
		unspec    = "an unspecified address"
		metadata  = "a cloud metadata address"
		cgnat     = "a shared (carrier-grade NAT) address"
		thisNet   = "a this-network address (0.0.0.0/8)"
		bcast     = "a broadcast address"
		bench     = "a benchmarking address"
		doc       = "a documentation address"
		reserved  = "a reserved address"
		ietf      = "a reserved (IETF protocol) address"
	)
	tests := []struct {
		addr, want string
	}{
		// Public IPv4, including the addresses just outside each range.
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"9.255.255.255", ""},
		{"11.0.0.0", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"126.255.255.255", ""},
		{"128.0.0.0", ""},
		{"169.253.255.255", ""},
		{"169.255.0.0", ""},
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"192.0.1.255", ""},
		{"192.167.255.255", ""},
		{"192.169.0.0", ""},
		{"198.17.255.255", ""},
		{"198.20.0.0", ""},
		{"223.255.255.255", ""},
		{"1.0.0.0", ""},

		// Forbidden IPv4.
		{"0.0.0.0", unspec},
		{"0.0.0.1", thisNet},
		{"0.255.255.255", thisNet},
		{"10.0.0.0", private},
		{"10.255.255.255", private},
		{"100.64.0.0", cgnat},
		{"100.127.255.255", cgnat},
		{"127.0.0.1", loopback},
		{"127.0.0.0", loopback},
		{"127.255.255.254", loopback},
		{"169.254.0.1", linkLocal},
		{"169.254.255.255", linkLocal},
		{"169.254.169.254", metadata},
		{"169.254.169.253", linkLocal},
		{"172.16.0.0", private},
		{"172.31.255.255", private},
		{"192.0.0.1", ietf},
		{"192.0.0.192", ietf},
		{"192.0.2.1", doc},
		{"192.168.0.1", private},
		{"192.168.255.255", private},
		{"198.18.0.0", bench},
		{"198.19.255.255", bench},
		{"198.51.100.7", doc},
		{"203.0.113.9", doc},
		{"224.0.0.1", multicast},
		{"239.255.255.250", multicast},
		{"240.0.0.1", reserved},
		{"255.255.255.254", reserved},
		{"255.255.255.255", bcast},

		// Public IPv6.
		{"2606:4700:4700::1111", ""},
		{"2001:4860:4860::8888", ""},
		{"2a00:1450:4001:80b::200e", ""},
		{"2001:1::1", ""}, // not in Teredo's 2001::/32

		// Forbidden IPv6.
		{"::", unspec},
		{"::1", loopback},
		{"fc00::1", private},
		{"fd12:3456:789a::1", private},
		{"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", private},
		{"fd00:ec2::254", metadata},
		{"fd00:ec2::253", private},
		{"fe80::1", linkLocal},
		{"fe80::1%eth0", linkLocal},
		{"febf:ffff::1", linkLocal},
		{"fec0::1", "a site-local address"},
		{"ff02::1", multicast},
		{"ff05::1:3", multicast},
		{"ff0e::1", multicast},
		{"100::1", "a discard-only address"},
		{"2001::1", "a Teredo tunnel address"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "a Teredo tunnel address"},
		{"2001:2::1", bench},
		{"2001:db8::1", doc},
		{"2001:db8:ffff::1", doc},
		{"3fff::1", doc},
		{"2001:10::1", reserved},
		{"2001:20::1", reserved},
		{"64:ff9b:1::1", "a local-use NAT64 address"},
		{"::127.0.0.1", reserved}, // IPv4-compatible (deprecated)
		{"::8.8.8.8", reserved},
		{"::ffff:0:7f00:1", reserved}, // IPv4-translated
		{"fbff::1", reserved},         // outside 2000::/3
		{"4000::1", reserved},
		{"1fff:ffff::1", reserved},

		// IPv4-mapped IPv6: like the IPv4 address.
		{"::ffff:8.8.8.8", ""},
		{"::ffff:127.0.0.1", loopback},
		{"::ffff:7f00:1", loopback},
		{"::ffff:10.1.2.3", private},
		{"::ffff:172.16.0.1", private},
		{"::ffff:192.168.1.1", private},
		{"::ffff:169.254.169.254", metadata},
		{"::ffff:169.254.1.1", linkLocal},
		{"::ffff:100.64.0.1", cgnat},
		{"::ffff:0.0.0.0", unspec},
		{"::ffff:0.1.2.3", thisNet},
		{"::ffff:224.0.0.1", multicast},
		{"::ffff:255.255.255.255", bcast},
		{"::ffff:198.18.0.1", bench},
		{"::ffff:192.0.2.1", doc},

		// NAT64 and 6to4 forms: refused when the IPv4 address is.
		{"64:ff9b::8.8.8.8", ""},
		{"64:ff9b::127.0.0.1", loopback + " (NAT64 for 127.0.0.1)"},
		{"64:ff9b::a9fe:a9fe", metadata + " (NAT64 for 169.254.169.254)"},
		{"64:ff9b::10.0.0.1", private + " (NAT64 for 10.0.0.1)"},
		{"2002:808:808::1", ""},
		{"2002:7f00:1::1", loopback + " (6to4 for 127.0.0.1)"},
		{"2002:c0a8:101::1", private + " (6to4 for 192.168.1.1)"},
		{"2002:a9fe:a9fe::", metadata + " (6to4 for 169.254.169.254)"},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		if got := ForbiddenReason(a); got != tt.want {
			t.Errorf("ForbiddenReason(%s) = %q, want %q", tt.addr, got, tt.want)
		}
	}
	if got := ForbiddenReason(netip.Addr{}); got == "" {
		t.Error("the zero Addr is allowed")
	}
}

func TestDialControl(t *testing.T) {
	deny, allow := DialControl(false), DialControl(true)
	tests := []struct {
		network, address string
		want             string // "" allowed
	}{
		{"tcp4", "8.8.8.8:443", ""},
		{"tcp6", "[2606:4700:4700::1111]:443", ""},
		{"tcp4", "127.0.0.1:8080", "refused to connect to 127.0.0.1, a loopback address"},
		{"tcp6", "[::1]:80", "refused to connect to ::1, a loopback address"},
		{"tcp6", "[::ffff:127.0.0.1]:80", "refused to connect to 127.0.0.1, a loopback address"},
		{"tcp4", "169.254.169.254:80", "refused to connect to 169.254.169.254, a cloud metadata address"},
		{"tcp6", "[fd00:ec2::254]:80", "refused to connect to fd00:ec2::254, a cloud metadata address"},
		{"tcp6", "[fe80::1%eth0]:80", "refused to connect to fe80::1, a link-local address"},
		{"tcp4", "10.0.0.1:443", "refused to connect to 10.0.0.1, a private address"},
		{"tcp4", "0.0.0.0:80", "refused to connect to 0.0.0.0, an unspecified address"},
		{"tcp", "example.com:80", `refused to connect to "example.com:80": not an IP address and port`},
		{"unix", "/run/docker.sock", `refused to connect to "/run/docker.sock": not an IP address and port`},
	}
	for _, tt := range tests {
		err := deny(tt.network, tt.address, nil)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s %s: %v, want allowed", tt.network, tt.address, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want):
			t.Errorf("%s %s: %v, want %q", tt.network, tt.address, err, tt.want)
		}
		if tt.want != "" && strings.HasPrefix(tt.want, "refused to connect to ") && !strings.Contains(tt.want, `"`) {
			var ae *AddrError
			if !errors.As(err, &ae) || ae.Reason == "" || !ae.Addr.IsValid() {
				t.Errorf("%s %s: %#v is not an *AddrError", tt.network, tt.address, err)
			}
		}
		if err := allow(tt.network, tt.address, nil); err != nil {
			t.Errorf("allowPrivate: %s %s: %v", tt.network, tt.address, err)
		}
	}
}

// testDNS is the resolver of the CheckURL tests and fuzz test.
func testDNS() *fakeDNS {
	return newFakeDNS().
		set("example.com", "93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c").
		set("public.test", "8.8.8.8").
		set("v6.test", "2606:4700:4700::1111").
		set("localhost", "127.0.0.1").
		set("evil.test", "127.0.0.1").
		set("mixed.test", "8.8.8.8", "10.0.0.1").
		set("mixed6.test", "8.8.8.8", "fd00::1").
		set("loop6.test", "::1").
		set("mapped.test", "::ffff:169.254.169.254").
		set("metadata.test", "169.254.169.254").
		set("nat64.test", "64:ff9b::a9fe:a9fe").
		set("cgnat.test", "100.64.1.1").
		set("linklocal6.test", "fe80::1").
		set("noaddr.test")
}

func TestCheckURL(t *testing.T) {
	r := testDNS().resolver()
	tests := []struct {
		url  string
		want string // "" valid; else the error's message, or its start when it ends in "…"
	}{
		{"https://example.com/hooks/coinpulse", ""},
		{"http://example.com", ""},
		{"HTTPS://EXAMPLE.COM/x?y=1#frag", ""},
		{"https://example.com:8443/x", ""},
		{"https://example.com:/x", ""},
		{"https://example.com./x", ""},
		{"https://public.test/", ""},
		{"https://v6.test/", ""},
		{"https://8.8.8.8/hook", ""},
		{"https://[2606:4700:4700::1111]:443/hook", ""},
		{"https://[::ffff:8.8.8.8]/hook", ""},

		{"", "the URL must start with http:// or https://"},
		{"example.com/hook", "the URL must start with http:// or https://"},
		{"ftp://example.com/", "the URL's scheme must be http or https, not ftp"},
		{"file:///etc/passwd", "the URL's scheme must be http or https, not file"},
		{"gopher://example.com/", "the URL's scheme must be http or https, not gopher"},
		{"http:example.com", "the URL has no host: write it as http://host/path or https://host/path"},
		{"https://", "the URL has no host"},
		{"https:///path", "the URL has no host"},
		{"https://:443/", "the URL has no host"},
		{"https://user:pass@example.com/", "the URL must not contain a user name or password"},
		{"https://user@example.com/", "the URL must not contain a user name or password"},
		{"https://example.com:0/", "the URL's port must be a number from 1 to 65535"},
		{"https://example.com:65536/", "the URL's port must be a number from 1 to 65535"},
		{"https://example.com:99999999999999999999/", "the URL's port must be a number from 1 to 65535"},
		{"https://example.com:abc/", "the URL is not valid: …"},
		{"https://exa mple.com/", "the URL is not valid: …"},
		{"https://[::1/", "the URL is not valid: …"},
		// net/url's errors without its name (an audit).
		{"http://127.0.0.1:9\\@evil.com/", "the URL is not valid: invalid userinfo"},
		{"http://example.com/\thook", "the URL is not valid: invalid control character in URL"},
		{"https://bücher.example/", "the host must be written in ASCII (use the xn-- form of an international domain name)"},
		{"http://127.1/", "the host looks like an IPv4 address but is not one in the usual a.b.c.d form"},
		{"http://2130706433/", "the host looks like an IPv4 address but is not one in the usual a.b.c.d form"},
		{"http://0x7f.0.0.1/", "the host looks like an IPv4 address but is not one in the usual a.b.c.d form"},
		{"http://0x7f000001/", "the host looks like an IPv4 address but is not one in the usual a.b.c.d form"},
		{"http://127.000.000.001/", "the host looks like an IPv4 address but is not one in the usual a.b.c.d form"},

		// IP literals.
		{"http://127.0.0.1:8080/", "the host 127.0.0.1 is a loopback address"},
		{"http://[::1]/", "the host ::1 is a loopback address"},
		{"http://[::ffff:127.0.0.1]/", "the host 127.0.0.1 is a loopback address"},
		{"http://[::ffff:169.254.169.254]/", "the host 169.254.169.254 is a cloud metadata address"},
		{"http://169.254.169.254/latest/meta-data/", "the host 169.254.169.254 is a cloud metadata address"},
		{"http://[fd00:ec2::254]/", "the host fd00:ec2::254 is a cloud metadata address"},
		{"http://10.0.0.5/", "the host 10.0.0.5 is a private address"},
		{"http://172.20.1.1/", "the host 172.20.1.1 is a private address"},
		{"http://192.168.1.1/", "the host 192.168.1.1 is a private address"},
		{"http://[fd12::1]/", "the host fd12::1 is a private address"},
		{"http://100.100.100.200/", "the host 100.100.100.200 is a shared (carrier-grade NAT) address"},
		{"http://0.0.0.0/", "the host 0.0.0.0 is an unspecified address"},
		{"http://[::]/", "the host :: is an unspecified address"},
		{"http://224.0.0.1/", "the host 224.0.0.1 is a multicast address"},
		{"http://255.255.255.255/", "the host 255.255.255.255 is a broadcast address"},
		{"http://198.18.0.1/", "the host 198.18.0.1 is a benchmarking address"},
		{"http://[fe80::1%25eth0]/", "the host must not be an IPv6 address with a zone"},
		{"http://[64:ff9b::7f00:1]/", "the host 64:ff9b::7f00:1 is a loopback address (NAT64 for 127.0.0.1)"},

		// Names: refused if any address is forbidden.
		{"http://localhost:8080/", "the host resolves to 127.0.0.1, a loopback address"},
		{"http://evil.test/", "the host resolves to 127.0.0.1, a loopback address"},
		{"http://EVIL.test./", "the host resolves to 127.0.0.1, a loopback address"},
		{"http://mixed.test/", "the host resolves to 10.0.0.1, a private address"},
		{"http://mixed6.test/", "the host resolves to fd00::1, a private address"},
		{"http://loop6.test/", "the host resolves to ::1, a loopback address"},
		{"http://mapped.test/", "the host resolves to 169.254.169.254, a cloud metadata address"},
		{"http://metadata.test/", "the host resolves to 169.254.169.254, a cloud metadata address"},
		{"http://nat64.test/", "the host resolves to 64:ff9b::a9fe:a9fe, a cloud metadata address (NAT64 for 169.254.169.254)"},
		{"http://cgnat.test/", "the host resolves to 100.64.1.1, a shared (carrier-grade NAT) address"},
		{"http://linklocal6.test/", "the host resolves to fe80::1, a link-local address"},
		{"http://absent.test/", "the host was not found in DNS"},
		{"http://noaddr.test/", "the host was not found in DNS"},
	}
	ctx := context.Background()
	for _, tt := range tests {
		err := CheckURL(ctx, tt.url, false, r)
		if !errMatches(err, tt.want) {
			t.Errorf("CheckURL(%q) = %v, want %q", tt.url, err, tt.want)
		}
		var ae *AddrError
		if errors.As(err, &ae) && (ae.Host == "" || ae.Reason == "" || ForbiddenReason(ae.Addr) != ae.Reason) {
			t.Errorf("CheckURL(%q): inconsistent %#v", tt.url, ae)
		}
		// With allowPrivate only the address checks go.
		err = CheckURL(ctx, tt.url, true, r)
		wantPrivate := tt.want
		if addressRefusal.MatchString(tt.want) {
			wantPrivate = ""
		}
		if !errMatches(err, wantPrivate) {
			t.Errorf("CheckURL(%q, allowPrivate) = %v, want %q", tt.url, err, wantPrivate)
		}
	}
}

// addressRefusal matches the errors of CheckURL that allowPrivate lifts:
// those about the host's addresses (with allowPrivate a name is not
// resolved).
var addressRefusal = regexp.MustCompile(`^the host (resolves to |[0-9a-f:.]+ is |was not found|must not be an IPv6 address with a zone)`)

// errMatches reports whether err has the message want ("" meaning nil; a
// want ending in "…" matches by prefix).
func errMatches(err error, want string) bool {
	if want == "" || err == nil {
		return want == "" && err == nil
	}
	if p, ok := strings.CutSuffix(want, "…"); ok {
		return strings.HasPrefix(err.Error(), p)
	}
	return err.Error() == want
}

func TestCheckURLCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := CheckURL(ctx, "https://public.test/", false, testDNS().resolver())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}

	// A DNS server that never answers: the lookup ends with ctx.
	silent := &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			client, server := net.Pipe()
			go func() {
				io.Copy(io.Discard, server) // until the client hangs up
				server.Close()
			}()
			return client, nil
		},
	}
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = CheckURL(ctx, "https://public.test/", false, silent)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("err = %v after %v, want context.DeadlineExceeded", err, time.Since(start))
	}
	if got := err.Error(); got != "the host could not be resolved: context deadline exceeded" {
		t.Errorf("error %q", got)
	}
}

// FuzzCheckURL checks that CheckURL never panics, and that what it accepts
// is an http(s) URL with a host and no user info whose addresses are all
// allowed. Resolution goes to a fakeDNS, never to the network.
func FuzzCheckURL(f *testing.F) {
	dns := testDNS()
	r := dns.resolver()
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, raw string, allowPrivate bool) {
		err := CheckURL(ctx, raw, allowPrivate, r)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("CheckURL(%q): empty error message", raw)
			}
			var ae *AddrError
			if errors.As(err, &ae) {
				if allowPrivate {
					t.Fatalf("CheckURL(%q, allowPrivate): %v", raw, err)
				}
				if ae.Reason == "" || ForbiddenReason(ae.Addr) != ae.Reason {
					t.Fatalf("CheckURL(%q): inconsistent %#v", raw, ae)
				}
			}
			return
		}
		u, perr := url.Parse(raw)
		if perr != nil {
			t.Fatalf("CheckURL accepted %q, which url.Parse refuses: %v", raw, perr)
		}
		if s := strings.ToLower(u.Scheme); s != "http" && s != "https" {
			t.Fatalf("CheckURL accepted %q, scheme %q", raw, u.Scheme)
		}
		if u.Hostname() == "" || u.User != nil || u.Opaque != "" {
			t.Fatalf("CheckURL accepted %q: host %q, user %v, opaque %q", raw, u.Hostname(), u.User, u.Opaque)
		}
		if allowPrivate {
			return
		}
		host := u.Hostname()
		if a, err := netip.ParseAddr(host); err == nil {
			if reason := ForbiddenReason(a); reason != "" || a.Zone() != "" {
				t.Fatalf("CheckURL accepted %q, whose host is %s", raw, reason)
			}
			return
		}
		addrs, _ := dns.lookup(host)
		for _, a := range addrs {
			if reason := ForbiddenReason(a); reason != "" {
				t.Fatalf("CheckURL accepted %q, which resolves to %s, %s", raw, a, reason)
			}
		}
	})
}
