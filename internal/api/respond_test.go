package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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
		{Timestamp: "t", RequestID: "r", TotalResults: &big, PerPage: &two, Total: &big, HasMore: &yes},
		{Timestamp: "t", RequestID: "r", PerPage: &two, Total: &one, HasMore: &no},
		{Timestamp: "t", RequestID: "r", Page: &one, Total: &one, UnknownIDs: []string{"nope", `we"ird<&>\id`, "é "}},
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

// Every success envelope reaches the client with a Content-Length, never
// chunked: small bodies get it from net/http, larger ones from writeRaw.
func TestWriteRawContentLength(t *testing.T) {
	// The envelope around data: {"success":true,"data":…,"meta":…}\n.
	envelope := len(`{"success":true,"data":,"meta":{"timestamp":"t","request_id":"r"}}`) + 1
	for _, n := range []int{0, 100, smallBody - 1, smallBody, smallBody + 1, 64 << 10} {
		// A JSON string whose envelope is n bytes.
		data, _ := json.Marshal(strings.Repeat("x", max(n-envelope-2, 0)))
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m := Meta{Timestamp: "t", RequestID: "r"}
			if err := writeRaw(w, http.StatusOK, data, &m); err != nil {
				t.Error(err)
			}
		}))
		for _, method := range []string{"GET", "HEAD"} {
			req, _ := http.NewRequest(method, srv.URL, nil)
			res, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			want := envelope + len(data)
			if method == "GET" && len(body) != want {
				t.Errorf("%s of %d bytes: read %d bytes, want %d", method, n, len(body), want)
			}
			if res.ContentLength != int64(want) || len(res.TransferEncoding) > 0 {
				t.Errorf("%s of %d bytes: Content-Length %d, Transfer-Encoding %v; want %d and none",
					method, n, res.ContentLength, res.TransferEncoding, want)
			}
		}
		srv.Close()
	}
}

// truncate never cuts a character in two: an echoed id or field name of
// multi-byte characters stays valid UTF-8.
func TestTruncateAtACharacter(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 50, "short"},
		{"abcdef", 3, "abc…"},
		{strings.Repeat("€", 30), 50, strings.Repeat("€", 16) + "…"}, // 48 bytes, not 50
		{"é", 1, "…"},
	} {
		if got := truncate(c.in, c.n); got != c.want || !utf8.ValidString(got) {
			t.Errorf("truncate(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

// Cache-Control's max-age is the whole seconds to the next refresh,
// rounded down, so that no cache keeps an answer past it (an audit: it
// was rounded up).
func TestCacheControlRoundsDown(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1058 * time.Millisecond:  "private, max-age=1",
		400 * time.Millisecond:   "private, max-age=0",
		-time.Second:             "private, max-age=0",
		59999 * time.Millisecond: "private, max-age=59",
		2 * time.Hour:            "private, max-age=7200",
	} {
		if got := cacheControl(d); len(got) != 1 || got[0] != want {
			t.Errorf("cacheControl(%s) = %q, want %q", d, got, want)
		}
	}
}
