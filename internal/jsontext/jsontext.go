// Package jsontext holds the checks of a JSON request body that
// encoding/json does not make: a name given twice in an object, which
// json.Unmarshal accepts, keeping the last.
package jsontext

import (
	"bytes"
	"encoding/json"
	"slices"
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
