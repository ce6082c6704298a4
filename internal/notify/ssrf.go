package notify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
)

// An AddrError refuses an address that webhooks may not reach (see
// ForbiddenReason). DialControl returns one for a refused connection, and
// CheckURL for a refused host.
type AddrError struct {
	// Host is the URL's host when CheckURL refused it ("" at dial time).
	Host string
	// Addr is the refused address (an IPv4-mapped address shown unmapped).
	Addr netip.Addr
	// Reason says what kind of address Addr is, e.g. "a loopback address".
	Reason string

	op addrOp
}

type addrOp int

const (
	opDial     addrOp = iota // DialControl
	opLiteral                // CheckURL, the host is an IP address
	opResolved               // CheckURL, the host resolved to Addr
)

// Error says what was refused in plain words, e.g. "the host resolves to
// 127.0.0.1, a loopback address".
func (e *AddrError) Error() string {
	switch e.op {
	case opLiteral:
		return fmt.Sprintf("the host %s is %s", e.Addr, e.Reason)
	case opResolved:
		return fmt.Sprintf("the host resolves to %s, %s", e.Addr, e.Reason)
	default:
		return fmt.Sprintf("refused to connect to %s, %s", e.Addr, e.Reason)
	}
}

type addrRule struct {
	prefix netip.Prefix
	reason string
}

func rules(pairs ...string) []addrRule {
	rs := make([]addrRule, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		rs = append(rs, addrRule{netip.MustParsePrefix(pairs[i]), pairs[i+1]})
	}
	return rs
}

// The forbidden ranges, the first match deciding the reason (so the more
// specific ranges come first).
var (
	v4Rules = rules(
		"169.254.169.254/32", "a cloud metadata address", // AWS, GCP, Azure, …
		"0.0.0.0/32", "an unspecified address",
		"255.255.255.255/32", "a broadcast address",
		"0.0.0.0/8", "a this-network address (0.0.0.0/8)",
		"10.0.0.0/8", "a private address",
		"100.64.0.0/10", "a shared (carrier-grade NAT) address",
		"127.0.0.0/8", "a loopback address",
		"169.254.0.0/16", "a link-local address",
		"172.16.0.0/12", "a private address",
		"192.0.0.0/24", "a reserved (IETF protocol) address", // also Oracle Cloud's metadata, 192.0.0.192
		"192.0.2.0/24", "a documentation address",
		"192.168.0.0/16", "a private address",
		"198.18.0.0/15", "a benchmarking address",
		"198.51.100.0/24", "a documentation address",
		"203.0.113.0/24", "a documentation address",
		"224.0.0.0/4", "a multicast address",
		"240.0.0.0/4", "a reserved address",
	)
	v6Rules = rules(
		"fd00:ec2::254/128", "a cloud metadata address", // AWS over IPv6
		"::/128", "an unspecified address",
		"::1/128", "a loopback address",
		"64:ff9b:1::/48", "a local-use NAT64 address",
		"::/8", "a reserved address", // IPv4-compatible, IPv4-translated, …
		"100::/64", "a discard-only address",
		"2001::/32", "a Teredo tunnel address",
		"2001:2::/48", "a benchmarking address",
		"2001:10::/28", "a reserved address", // ORCHID
		"2001:20::/28", "a reserved address", // ORCHIDv2
		"2001:db8::/32", "a documentation address",
		"3fff::/20", "a documentation address",
		"fc00::/7", "a private address",
		"fe80::/10", "a link-local address",
		"fec0::/10", "a site-local address",
		"ff00::/8", "a multicast address",
	)
	nat64Prefix   = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour     = netip.MustParsePrefix("2002::/16")
	globalUnicast = netip.MustParsePrefix("2000::/3")
)

// ForbiddenReason says why webhooks may not reach a, as a phrase such as
// "a loopback address", or returns "" when they may. Refused are the
// unspecified, loopback, private (RFC 1918, fc00::/7), shared (CGNAT,
// 100.64.0.0/10), link-local (169.254.0.0/16, fe80::/10), site-local,
// multicast, broadcast, benchmarking (198.18.0.0/15, 2001:2::/48),
// documentation, this-network (0.0.0.0/8) and other reserved ranges, the
// cloud metadata addresses 169.254.169.254 and fd00:ec2::254, every IPv6
// address outside 2000::/3, Teredo, and the IPv4-mapped (::ffff:a.b.c.d),
// NAT64 (64:ff9b::/96) and 6to4 (2002::/16) forms of a refused IPv4
// address. A zone (fe80::1%eth0) is ignored.
func ForbiddenReason(a netip.Addr) string {
	if !a.IsValid() {
		return "not a valid IP address"
	}
	a = a.WithZone("")
	if a.Is4In6() {
		a = a.Unmap()
	}
	if a.Is4() {
		return match(v4Rules, a)
	}
	if nat64Prefix.Contains(a) {
		b := a.As16()
		return embedded(netip.AddrFrom4([4]byte(b[12:16])), "NAT64")
	}
	if sixToFour.Contains(a) {
		b := a.As16()
		return embedded(netip.AddrFrom4([4]byte(b[2:6])), "6to4")
	}
	if r := match(v6Rules, a); r != "" {
		return r
	}
	if !globalUnicast.Contains(a) {
		return "a reserved address"
	}
	return ""
}

func match(rs []addrRule, a netip.Addr) string {
	for _, r := range rs {
		if r.prefix.Contains(a) {
			return r.reason
		}
	}
	return ""
}

// embedded is the reason of an IPv6 address that stands for the IPv4
// address v4 (form says how).
func embedded(v4 netip.Addr, form string) string {
	if r := match(v4Rules, v4); r != "" {
		return fmt.Sprintf("%s (%s for %s)", r, form, v4)
	}
	return ""
}

// DialControl returns a net.Dialer Control function that refuses, with an
// *AddrError, to connect to an address ForbiddenReason refuses, unless
// allowPrivate is set (then it allows everything). It runs after DNS
// resolution, on the address actually dialed, so a host name that
// resolves to a refused address (DNS rebinding included) is refused too.
// It also refuses an address that is not an IP address and port.
func DialControl(allowPrivate bool) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		if allowPrivate {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("refused to connect to %q: not an IP address and port", address)
		}
		if r := ForbiddenReason(ap.Addr()); r != "" {
			return &AddrError{Addr: ap.Addr().WithZone("").Unmap(), Reason: r, op: opDial}
		}
		return nil
	}
}

// CheckURL checks a webhook endpoint's URL when it is registered: the
// scheme is http or https, there is a host, there is no user name or
// password, and the port, if any, is 1 to 65535. Unless allowPrivate is
// set, the host (an IP address, or a name resolved with resolver, nil
// meaning net.DefaultResolver) must not be or resolve to any address
// ForbiddenReason refuses; with allowPrivate the host is not resolved.
// The error's message names the problem in plain words, e.g. "the host
// resolves to 127.0.0.1, a loopback address" (an *AddrError); when ctx
// ends during resolution the error wraps ctx.Err().
//
// The check at registration is a courtesy to the subscriber: DNS can
// change, so the Sender checks again the address it dials.
func CheckURL(ctx context.Context, rawURL string, allowPrivate bool, resolver *net.Resolver) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		// net/url's errors name the package ("net/url: invalid userinfo").
		return fmt.Errorf("the URL is not valid: %s", strings.TrimPrefix(err.Error(), "net/url: "))
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "":
		return errors.New("the URL must start with http:// or https://")
	default:
		return fmt.Errorf("the URL's scheme must be http or https, not %s", u.Scheme)
	}
	if u.Opaque != "" {
		return errors.New("the URL has no host: write it as http://host/path or https://host/path")
	}
	if u.User != nil {
		return errors.New("the URL must not contain a user name or password")
	}
	host := u.Hostname()
	if host == "" {
		return errors.New("the URL has no host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return errors.New("the URL's port must be a number from 1 to 65535")
		}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if allowPrivate {
			return nil
		}
		if a.Zone() != "" {
			return errors.New("the host must not be an IPv6 address with a zone")
		}
		if r := ForbiddenReason(a); r != "" {
			return &AddrError{Host: host, Addr: a.Unmap(), Reason: r, op: opLiteral}
		}
		return nil
	}
	for i := 0; i < len(host); i++ {
		if host[i] >= 0x80 {
			return errors.New("the host must be written in ASCII (use the xn-- form of an international domain name)")
		}
	}
	if numericHost(host) {
		return errors.New("the host looks like an IPv4 address but is not one in the usual a.b.c.d form")
	}
	if allowPrivate {
		return nil
	}
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("the host could not be resolved: %w", err)
	}
	addrs, err := resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("the host could not be resolved: %w", ctx.Err())
		}
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			return errors.New("the host was not found in DNS")
		}
		return errors.New("the host could not be resolved; try again later")
	}
	if len(addrs) == 0 {
		return errors.New("the host was not found in DNS")
	}
	for _, a := range addrs {
		if r := ForbiddenReason(a); r != "" {
			return &AddrError{Host: host, Addr: a.WithZone("").Unmap(), Reason: r, op: opResolved}
		}
	}
	return nil
}

// numericHost reports whether host's last label (ignoring a final dot) is
// a number, decimal or 0x hexadecimal: such hosts are IPv4 addresses in a
// legacy form (127.1, 2130706433, 0x7f.0.0.1) that some resolvers accept
// and others look up as names. No top-level domain is numeric.
func numericHost(host string) bool {
	host = strings.TrimSuffix(host, ".")
	label := host[strings.LastIndexByte(host, '.')+1:]
	if label == "" {
		return false
	}
	if len(label) > 2 && (label[:2] == "0x" || label[:2] == "0X") {
		label = label[2:]
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(label); i++ {
		if label[i] < '0' || label[i] > '9' {
			return false
		}
	}
	return true
}
