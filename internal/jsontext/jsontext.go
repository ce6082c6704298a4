// Package jsontext holds the checks of a JSON request body that
// encoding/json does not make: a name given twice in an object, which
// json.Unmarshal accepts, keeping the last, and a lone surrogate escape,
// which it decodes to U+FFFD.
package jsontext

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
)

// RepeatedNames returns the names given more than once in the JSON object
// raw, in the order of their second occurrence; nil when raw is not an
// object. Names are compared unescaped: "typ\u0065" is "type". It is
// meant for a body json.Unmarshal has accepted, and stops at the first
// syntax error.
func RepeatedNames(raw []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	seen := make(map[string]bool)
	var repeated []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return repeated
		}
		name, _ := tok.(string)
		if seen[name] && !slices.Contains(repeated, name) {
			repeated = append(repeated, name)
		}
		seen[name] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return repeated
		}
	}
	return repeated
}

// LoneSurrogate reports whether the JSON string v escapes half of a
// surrogate pair without the other half: a high one (\ud800-\udbff) not
// followed at once by an escaped low one (\udc00-\udfff), or a low one
// alone. encoding/json decodes such an escape to U+FFFD without an
// error, so a body that sent one would be stored other than it was sent.
func LoneSurrogate(v []byte) bool {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(v) || v[i] != '\\' || v[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(v[i+2:i+6]), 16, 16)
		return rune(n), err == nil
	}
	for i := 0; i < len(v); i++ {
		if v[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // \\, \", \n...: the escaped character is not an escape
			continue
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		case r >= 0xD800 && r <= 0xDBFF:
			low, ok := hex4(i + 6)
			if !ok || low < 0xDC00 || low > 0xDFFF {
				return true
			}
			i += 11
		default:
			i += 5
		}
	}
	return false
}
