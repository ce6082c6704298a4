package coinpulse

import (
	"errors"
	"time"
)

// ParseTimestamp reads an RFC 3339 date-time, such as 2026-01-02T15:04:05Z,
// 2026-01-02T15:04:05.5+01:00 or, as RFC 3339 allows, in lower case. It
// holds the text to RFC 3339's syntax, which time.Parse does not: that
// takes a one-digit hour, a comma before the fraction, and offsets of
// +24:00 or +00:60, by which it shifts the time.
func ParseTimestamp(s string) (time.Time, error) {
	if len(s) > 10 && s[10] == 't' {
		s = s[:10] + "T" + s[11:]
	}
	if n := len(s); n > 0 && s[n-1] == 'z' {
		s = s[:n-1] + "Z"
	}
	if !rfc3339Syntax(s) {
		return time.Time{}, errNotRFC3339
	}
	return time.Parse(time.RFC3339Nano, s) // the ranges of the fields
}

var errNotRFC3339 = errors.New("not an RFC 3339 date-time")

// rfc3339Syntax reports whether s is YYYY-MM-DDTHH:MM:SS, then a fraction
// after a ".", then Z or an offset of hours 00-23 and minutes 00-59.
func rfc3339Syntax(s string) bool {
	digits := func(s string) bool {
		for i := range len(s) {
			if s[i] < '0' || s[i] > '9' {
				return false
			}
		}
		return true
	}
	if len(s) < 20 || !digits(s[0:4]) || s[4] != '-' || !digits(s[5:7]) || s[7] != '-' || !digits(s[8:10]) || s[10] != 'T' ||
		!digits(s[11:13]) || s[13] != ':' || !digits(s[14:16]) || s[16] != ':' || !digits(s[17:19]) {
		return false
	}
	rest := s[19:]
	if rest[0] == '.' {
		i := 1
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 1 {
			return false
		}
		rest = rest[i:]
	}
	if rest == "Z" {
		return true
	}
	below := func(s string, n int) bool { return digits(s) && int(s[0]-'0')*10+int(s[1]-'0') < n }
	return len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':' && below(rest[1:3], 24) && below(rest[4:6], 60)
}
