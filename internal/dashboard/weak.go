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
		"asdfgh", "asdfghjkl", "zxcvbn", "zxcvbnm", "qazwsx", "qazwsxedc", "qazwsxedcrfv", "iloveyou", "welcome", "letmein", "admin",
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
	if repeats(lower) {
		return "This password repeats a shorter one; choose another."
	}
	if walk(lower) {
		return "This password is typed mostly on neighbouring keys, or counts up or down (such as 1q2w3e4r or 12345qwert); choose another."
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

// repeats reports whether s is a shorter string said again, whole or in
// part ("passwordpassword", "123qwe123qwe", "1234512345").
func repeats(s string) bool {
	rs := []rune(s)
	for period := 1; period <= len(rs)/2; period++ {
		same := true
		for i := period; i < len(rs) && same; i++ {
			same = rs[i] == rs[i-period]
		}
		if same {
			return true
		}
	}
	return false
}

// keyboard is a US QWERTY keyboard's rows, unshifted; each row's keys sit
// between two of the row above's (so q touches 1 and 2, a touches q and w).
var keyboard = [...]string{"`1234567890-=", "qwertyuiop[]\\", "asdfghjkl;'", "zxcvbnm,./"}

// keyAt is where each key is (row, column), shifted characters at their
// key's place.
var keyAt = func() map[rune][2]int {
	m := map[rune][2]int{}
	for r, row := range keyboard {
		for c, k := range row {
			if r == 0 {
				// The number row starts a half key to the left of
				// the letters: its columns from 0 at 1.
				c--
			}
			m[k] = [2]int{r, c}
		}
	}
	for shifted, key := range map[rune]rune{'~': '`', '!': '1', '@': '2', '#': '3', '$': '4', '%': '5', '^': '6', '&': '7', '*': '8', '(': '9', ')': '0',
		'_': '-', '+': '=', '{': '[', '}': ']', '|': '\\', ':': ';', '"': '\'', '<': ',', '>': '.', '?': '/'} {
		m[shifted] = m[key]
	}
	return m
}()

// walk reports whether s, in lower case, walks the keyboard or counts:
// four in five of its steps from one character to the next go to a key
// that touches on a QWERTY keyboard, or to the letter or digit one up or
// down ("1q2w3e4r5t6y7u", "1qaz2wsx3edc4rfv", "!qaz2wsx#edc",
// "12345qwert", "123456789a"). A walk goes on: a step back to the key
// before ("ese" in "desert") is no walk's, and one character twice is no
// step at all (a double letter is in many words). Letters alone walk only
// if every step does ("qazxswedc"): words typed with one hand, such as
// "treesdesert", take most of their steps to touching keys.
func walk(s string) bool {
	var rs []rune
	letters := true
	for _, r := range s {
		if len(rs) == 0 || rs[len(rs)-1] != r {
			rs = append(rs, r)
		}
		letters = letters && 'a' <= r && r <= 'z'
	}
	if len(rs) < 2 {
		return false
	}
	breaks := 0
	for i := 1; i < len(rs); i++ {
		if !near(rs[i-1], rs[i]) || i >= 2 && rs[i] == rs[i-2] {
			breaks++
		}
	}
	if letters {
		return breaks == 0
	}
	return breaks*5 <= len(rs)-1
}

// near reports whether a and b (not the same) are keys that touch, or
// letters or digits one step apart.
func near(a, b rune) bool {
	if alnum(a) == alnum(b) && alnum(a) != 0 {
		if d := stepOf(a, b); d == 1 || d == -1 {
			return true
		}
	}
	pa, oka := keyAt[a]
	pb, okb := keyAt[b]
	if !oka || !okb {
		return false
	}
	if pa == pb {
		return true // a character and its shifted one
	}
	if pb[0] < pa[0] {
		pa, pb = pb, pa // pa the upper
	}
	switch pb[0] - pa[0] {
	case 0:
		return pb[1]-pa[1] == 1 || pa[1]-pb[1] == 1
	case 1: // the lower key sits between the upper's column and the next
		return pa[1] == pb[1] || pa[1] == pb[1]+1
	}
	return false
}

// alnum is 'a' for an ASCII lower-case letter, '0' for a digit, else 0.
func alnum(r rune) rune {
	switch {
	case 'a' <= r && r <= 'z':
		return 'a'
	case '0' <= r && r <= '9':
		return '0'
	}
	return 0
}
