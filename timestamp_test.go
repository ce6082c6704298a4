package coinpulse

import (
	"testing"
	"time"
)

func TestParseTimestamp(t *testing.T) {
	for in, want := range map[string]string{
		"2026-01-02T15:04:05Z":        "2026-01-02T15:04:05Z",
		"2026-01-02t15:04:05z":        "2026-01-02T15:04:05Z",
		"2026-01-02T15:04:05.5+01:00": "2026-01-02T14:04:05.5Z",
		"2026-01-02T15:04:05-00:00":   "2026-01-02T15:04:05Z",
		"2026-01-02T00:00:00+23:59":   "2026-01-01T00:01:00Z",
		"2026-01-02T15:04:05.123456Z": "2026-01-02T15:04:05.123456Z",
	} {
		got, err := ParseTimestamp(in)
		if err != nil || got.UTC().Format(time.RFC3339Nano) != want {
			t.Errorf("ParseTimestamp(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	// What time.Parse takes and RFC 3339 does not (an audit), and plain
	// mistakes.
	for _, in := range []string{
		"2026-01-02T10:00:00+24:00", "2026-01-02T10:00:00+00:60", "2026-01-02T10:00:00,5Z",
		"2026-01-02T1:00:00Z", "2026-01-02T10:00:00.Z", "2026-01-02T10:00:00", "2026-01-02 10:00:00Z",
		"2026-13-02T10:00:00Z", "2026-01-32T10:00:00Z", "2026-01-02T24:00:00Z", "", "yesterday",
		"2026-01-02T10:00:00+0100", "2026-01-02T10:00:00Z ", "+2026-01-02T10:00:00Z",
	} {
		if got, err := ParseTimestamp(in); err == nil {
			t.Errorf("ParseTimestamp(%q) = %v, want an error", in, got)
		}
	}
}
