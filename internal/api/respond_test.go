package api

import (
	"encoding/json"
	"testing"
)

// The hand-written meta encoder gives exactly encoding/json's bytes.
func TestMetaAppendJSONMatchesEncodingJSON(t *testing.T) {
	yes, no := true, false
	one, two, big := 1, 2, 1<<40
	vol := 50_000.5
	for _, m := range []Meta{
		{Timestamp: "2026-11-23T08:00:00.000Z", RequestID: "req_1"},
		{Timestamp: "t", RequestID: "r", AsOf: "a", Snapshot: "s", Feed: "sim", Simulated: &yes},
		{Timestamp: "t", RequestID: "r", Feed: `we"ird\feed`, Simulated: &no, Query: "q<&>\"\\\x01\u2028é"},
		{Timestamp: "t", RequestID: "r", MinMoverVolume: &vol},
		{Timestamp: "t", RequestID: "r", CurrentPage: &one, TotalPages: &two, TotalResults: &big, Page: &one, PerPage: &two, Total: &big},
	} {
		want, err := json.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.appendJSON(nil); string(got) != string(want) {
			t.Errorf("appendJSON:\n got %s\nwant %s", got, want)
		}
	}
}

// FuzzMetaQuery: any search text is encoded as encoding/json would.
func FuzzMetaQuery(f *testing.F) {
	for _, s := range []string{"bitcoin", "", "\x00", "\"", "\\", "\u2028", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		m := Meta{Timestamp: "t", RequestID: "r", Query: q}
		want, _ := json.Marshal(&m)
		if got := m.appendJSON(nil); string(got) != string(want) {
			t.Fatalf("query %q:\n got %s\nwant %s", q, got, want)
		}
	})
}
