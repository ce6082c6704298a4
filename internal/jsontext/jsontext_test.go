package jsontext

import (
	"slices"
	"testing"
)

func TestRepeatedNames(t *testing.T) {
	for raw, want := range map[string][]string{
		`{}`:            nil,
		`{"a":1,"b":2}`: nil,
		`{"a":1,"a":2}`: {"a"},
		`{"type":"buy","q":1,"typ\u0065":"sell"}`:     {"type"},
		`{"a":1,"b":{"a":2,"a":3},"b":4,"a":5,"a":6}`: {"b", "a"}, // nested objects are not looked into
		`{"":1,"":2}`: {""},
		`[1,2]`:       nil,
		`"a"`:         nil,
		`{"a":1,"a"`:  {"a"},
	} {
		if got := RepeatedNames([]byte(raw)); !slices.Equal(got, want) {
			t.Errorf("RepeatedNames(%s) = %q, want %q", raw, got, want)
		}
	}
}
