package dashboard

import (
	"strings"
	"unicode"
)

// Passwords that are long enough but among the first an attacker tries
// (NIST SP 800-63B §5.1.1.2: refuse commonly used, expected and
// context-specific passwords). commonBases are refused with any digits
// and symbols before or after them ("Password2024!"); commonWhole are
// keyboard walks refused as they are.
var (
	commonBases = set("password", "passw0rd", "p@ssword", "p@ssw0rd", "qwerty", "qwertyuiop", "qwertyuiop[]", "qwertz", "azerty",
		"asdfgh", "asdfghjkl", "zxcvbn", "zxcvbnm", "qazwsx", "qazwsxedc", "iloveyou", "welcome", "letmein", "admin",
		"administrator", "changeme", "secret", "monkey", "dragon", "sunshine", "princess", "football", "baseball",
		"superman", "batman", "master", "shadow", "trustno", "whatever", "starwars", "computer", "internet", "coinpulse",
		"bitcoin", "ethereum", "crypto", "cryptocurrency", "blockchain", "satoshi", "hodl", "tothemoon", "abc", "abcdef")
	commonWhole = set("1q2w3e4r5t", "1q2w3e4r5t6y", "1qaz2wsx3edc", "zaq12wsxcde3", "q1w2e3r4t5", "q1w2e3r4t5y6",
		"1234qwer", "123qweasdzxc", "qweasdzxc123", "1qazxsw2", "zaq1xsw2cde3", "a1b2c3d4e5", "a1b2c3d4e5f6")
)

func set(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// guessable says why pw, long enough already, is among the first
// passwords an attacker would try for the account email, or "".
func guessable(pw, email string) string {
	lower := strings.ToLower(pw)
	if commonWhole[lower] || commonBases[strings.TrimFunc(lower, notLetter)] {
		return "This password is among the most common ones; choose another."
	}
	if sequence(lower) {
		return "This password is a sequence or repeats a few characters; choose another."
	}
	if email != "" {
		e := strings.ToLower(email)
		local := e[:max(strings.IndexByte(e, '@'), 0)]
		if strings.Contains(lower, e) || len(local) >= 5 && strings.Contains(lower, local) {
			return "A password must not contain your e-mail address; choose another."
		}
	}
	return ""
}

func notLetter(r rune) bool { return !unicode.IsLetter(r) }

// sequence reports whether s uses fewer than 5 distinct characters
// ("abababab12"), or runs up or down one step at a time ("1234567890",
// "zyxwvutsrq").
func sequence(s string) bool {
	seen := map[rune]bool{}
	for _, r := range s {
		seen[r] = true
	}
	if len(seen) < 5 {
		return true
	}
	rs := []rune(s)
	step := stepOf(rs[0], rs[1])
	if step != 1 && step != -1 {
		return false
	}
	for i := 2; i < len(rs); i++ {
		if stepOf(rs[i-1], rs[i]) != step {
			return false
		}
	}
	return true
}

// stepOf is b-a, digits going round ("90" a step up, "09" one down).
func stepOf(a, b rune) rune {
	d := b - a
	if '0' <= a && a <= '9' && '0' <= b && b <= '9' {
		switch d {
		case -9:
			return 1
		case 9:
			return -1
		}
	}
	return d
}
