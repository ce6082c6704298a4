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

func TestLoneSurrogate(t *testing.T) {
	for v, want := range map[string]bool{
		`"plain"`:              false,
		`"\ud83d\ude00"`:       false, // a pair: 😀
		`"a\ud800"`:            true,
		`"\udc00b"`:            true,
		`"\ud800\u0041"`:       true,
		`"\\ud800"`:            false, // an escaped backslash, then text
		`["read", "\ud800x"]`:  true,
		`"\u00e9\ud83d\ude00"`: false,
		`"\ud83d\ude00\ud83d"`: true,
	} {
		if got := LoneSurrogate([]byte(v)); got != want {
			t.Errorf("LoneSurrogate(%s) = %v, want %v", v, got, want)
		}
	}
}
