package coinpulse

import "testing"

// EmailKey: one key for one address however it is typed, and, for text
// that is not UTF-8, one key per byte string.
func TestEmailKey(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"Ann@Example.COM", "ann@example.com"},
		{"Ärger@Bücher.example", "ärger@bücher.example"},
		{"A\u0308rger@example.com", "ärger@example.com"}, // decomposed
		{"\u212Aate@example.com", "kate@example.com"},    // the Kelvin sign
		{"\xc4RGER@example.com", "\xc4rger@example.com"}, // Latin-1: ASCII folded, the byte kept
	} {
		if ka, kb := EmailKey(c.a), EmailKey(c.b); ka != kb {
			t.Errorf("EmailKey(%q) = %q, EmailKey(%q) = %q; want one key", c.a, ka, c.b, kb)
		}
	}
	for _, c := range []struct{ a, b string }{
		{"\xc4rger@example.com", "\xd6rger@example.com"}, // two Latin-1 addresses
		{"ärger@example.com", "arger@example.com"},
		{"\xc4rger@example.com", "\ufffdrger@example.com"},
	} {
		if EmailKey(c.a) == EmailKey(c.b) {
			t.Errorf("%q and %q have one key, %q", c.a, c.b, EmailKey(c.a))
		}
	}
	for _, s := range []string{"Ärger@x.example", "A\u0308RGER@x.example", "\xc4R@x", "İnfo@x.example", "ǅ@x.example"} {
		if k := EmailKey(s); EmailKey(k) != k {
			t.Errorf("EmailKey is not idempotent on %q: %q, then %q", s, k, EmailKey(k))
		}
	}
}
