package stream

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"coinpulse"
)

func TestParseClientMessage(t *testing.T) {
	ok := []struct {
		in   string
		want ClientMessage
	}{
		{`{"type":"ping"}`, ClientMessage{Type: "ping"}},
		{` {"type" : "ping", "id" : 12 } `, ClientMessage{Type: "ping", ID: json.RawMessage(`12`)}},
		{`{"id":"a\u0062","type":"ping"}`, ClientMessage{Type: "ping", ID: json.RawMessage(`"ab"`)}},
		{`{"type":"auth","api_key":"sk_live_x"}`, ClientMessage{Type: "auth", APIKey: "sk_live_x"}},
		{`{"type":"subscribe","channel":"prices","coins":["btc","ethereum"]}`,
			ClientMessage{Type: "subscribe", Channel: "prices", Coins: []string{"btc", "ethereum"}}},
		{`{"type":"unsubscribe","channel":"prices"}`, ClientMessage{Type: "unsubscribe", Channel: "prices"}},
		{`{"type":"subscribe","channel":"alerts","id":-1.5}`, ClientMessage{Type: "subscribe", Channel: "alerts", ID: json.RawMessage(`-1.5`)}},
		{`{"type":"unsubscribe","channel":"alerts"}`, ClientMessage{Type: "unsubscribe", Channel: "alerts"}},
		{`{"type":"subscribe","channel":"prices","coins":["` + strings.Repeat("é", 100) + `"]}`,
			ClientMessage{Type: "subscribe", Channel: "prices", Coins: []string{strings.Repeat("é", 100)}}},
	}
	for _, tc := range ok {
		got, err := ParseClientMessage([]byte(tc.in))
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.in, got, tc.want)
		}
	}

	many := `{"type":"subscribe","channel":"prices","coins":[` + strings.Repeat(`"a",`, MaxCoinsPerMessage) + `"a"]}`
	bad := []struct{ in, field string }{
		{``, "message"},
		{`null`, "message"},
		{`"ping"`, "message"},
		{`{}`, "type"},
		{`{"type":""}`, "type"},
		{`{"type":null}`, "type"},
		{`{"type":"PING"}`, "type"},
		{`{"TYPE":"ping"}`, "TYPE"},
		{`{"type":"ping"}{}`, "message"},
		{`{"type":"ping"} x`, "message"},
		{`{"type":"ping",}`, "message"},
		{`{"type":"ping","id":null}`, "id"},
		{`{"type":"ping","id":true}`, "id"},
		{`{"type":"ping","id":[1]}`, "id"},
		{`{"type":"ping","id":"` + strings.Repeat("x", 200) + `"}`, "id"},
		{`{"type":"ping","channel":"prices"}`, "channel"},
		{`{"type":"ping","api_key":"k"}`, "api_key"},
		{`{"type":"auth"}`, "api_key"},
		{`{"type":"auth","api_key":""}`, "api_key"},
		{`{"type":"auth","api_key":"` + strings.Repeat("k", 300) + `"}`, "api_key"},
		{`{"type":"auth","api_key":"k","coins":["a"]}`, "coins"},
		{`{"type":"subscribe"}`, "channel"},
		{`{"type":"subscribe","channel":"Prices","coins":["a"]}`, "channel"},
		{`{"type":"subscribe","channel":"prices"}`, "coins"},
		{`{"type":"subscribe","channel":"prices","coins":null}`, "coins"},
		{`{"type":"subscribe","channel":"prices","coins":{}}`, "coins"},
		{`{"type":"subscribe","channel":"prices","coins":[]}`, "coins"},
		{`{"type":"subscribe","channel":"prices","coins":[""]}`, "coins[0]"},
		{`{"type":"subscribe","channel":"prices","coins":["a",null]}`, "coins[1]"},
		{`{"type":"subscribe","channel":"prices","coins":["` + strings.Repeat("x", 101) + `"]}`, "coins[0]"},
		{many, "coins"},
		{`{"type":"unsubscribe","channel":"alerts","coins":["a"]}`, "coins"},
		{`{"type":"unsubscribe","channel":"prices","coins":[]}`, "coins"},
		{`{"type":"ping","coins":["a"],"coins":["b"]}`, "coins"},
	}
	for _, tc := range bad {
		_, err := ParseClientMessage([]byte(tc.in))
		var e *coinpulse.Error
		if !errors.As(err, &e) || e.Code != coinpulse.CodeValidation {
			t.Errorf("%.80s: err %v, want VALIDATION_ERROR", tc.in, err)
			continue
		}
		if len(e.Details) != 1 || e.Details[0].Field != tc.field {
			t.Errorf("%.80s: details %v, want field %s", tc.in, e.Details, tc.field)
		}
		if e.Message == "" {
			t.Errorf("%.80s: no message", tc.in)
		}
	}

	if _, err := ParseClientMessage(make([]byte, MaxMessageBytes+1)); coinpulse.ErrorCode(err) != coinpulse.CodePayloadTooLarge {
		t.Errorf("oversized: %v", err)
	}
	// The id survives an error, found before or after it (an audit: an
	// error before it lost it); an id that is itself wrong is not echoed.
	for in, id := range map[string]string{
		`{"id":"x","type":"nope"}`:                                    `"x"`,
		`{"type":"subscribe","channel":"prices","coins":[],"id":"c"}`: `"c"`,
		`{"type":1,"id":7}`:                                           `7`,
		`{"extra":{"id":1},"id":"x"}`:                                 `"x"`,
		`{"type":"ping","type":"ping","id":"x"}`:                      `"x"`,
		many[:len(many)-1] + `,"id":"m"}`:                             `"m"`,
		`{"type":"ping","id":null}`:                                   ``,
		`{"type":"ping","id":"x","id":"y"}`:                           `"x"`,
		`{"type":1,"id":[1]}`:                                         ``,
		`{"type":1,"x":}, "id":"x"}`:                                  ``,
	} {
		m, err := ParseClientMessage([]byte(in))
		if err == nil || string(m.ID) != id {
			t.Errorf("%.80s: id %s, %v; want an error echoing id %s", in, m.ID, err, id)
		}
	}
}

// FuzzParseClientMessage checks that the parser never panics and that
// what it accepts is valid: a known type with the fields it allows, in
// bounds, which encodes back to a message that parses the same.
func FuzzParseClientMessage(f *testing.F) {
	for _, s := range []string{
		`{"type":"ping"}`,
		`{"type":"ping","id":7}`,
		`{"type":"auth","api_key":"sk_live_abc","id":"a"}`,
		`{"type":"subscribe","channel":"prices","coins":["bitcoin","eth"]}`,
		`{"type":"unsubscribe","channel":"prices","coins":["eth"]}`,
		`{"type":"unsubscribe","channel":"prices"}`,
		`{"type":"subscribe","channel":"alerts"}`,
		`{"type":"unsubscribe","channel":"alerts","id":-1e3}`,
		`{"type":"subscribe","channel":"prices","coins":[]}`,
		`{"type":"ping","type":"ping"}`,
		`{"Type":"ping"}`,
		`{"type":"ping"} {}`,
		`[]`,
		`{"type":"subscribe","channel":"prices","coins":["\u00e9\ud800"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseClientMessage(data)
		if err != nil {
			var e *coinpulse.Error
			if !errors.As(err, &e) || (e.Code != coinpulse.CodeValidation && e.Code != coinpulse.CodePayloadTooLarge) || e.Message == "" {
				t.Fatalf("error %v", err)
			}
			if m.ID != nil && !json.Valid(m.ID) {
				t.Fatalf("invalid id %q", m.ID)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		switch m.Type {
		case TypeAuth:
			if m.APIKey == "" || len(m.APIKey) > MaxAPIKeyLength || m.Channel != "" || m.Coins != nil {
				t.Fatalf("bad auth %+v", m)
			}
		case TypeSubscribe, TypeUnsubscribe:
			if m.APIKey != "" || (m.Channel != ChannelPrices && m.Channel != ChannelAlerts) {
				t.Fatalf("bad %+v", m)
			}
			if m.Channel == ChannelAlerts && m.Coins != nil || m.Type == TypeSubscribe && m.Channel == ChannelPrices && m.Coins == nil {
				t.Fatalf("bad coins %+v", m)
			}
			if m.Coins != nil && (len(m.Coins) == 0 || len(m.Coins) > MaxCoinsPerMessage) {
				t.Fatalf("%d coins", len(m.Coins))
			}
			for _, c := range m.Coins {
				if c == "" || utf8.RuneCountInString(c) > MaxCoinLength {
					t.Fatalf("coin %q", c)
				}
			}
		case TypePing:
			if m.APIKey != "" || m.Channel != "" || m.Coins != nil {
				t.Fatalf("bad ping %+v", m)
			}
		default:
			t.Fatalf("type %q", m.Type)
		}
		if m.ID != nil && (!json.Valid(m.ID) || len(m.ID) > MaxIDLength) {
			t.Fatalf("id %q", m.ID)
		}
		// Round trip.
		out := map[string]any{"type": m.Type}
		if m.ID != nil {
			out["id"] = m.ID
		}
		if m.APIKey != "" {
			out["api_key"] = m.APIKey
		}
		if m.Channel != "" {
			out["channel"] = m.Channel
		}
		if m.Coins != nil {
			out["coins"] = m.Coins
		}
		b, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := ParseClientMessage(b)
		if err != nil && len(b) <= MaxMessageBytes {
			t.Fatalf("re-encoded %s: %v", b, err)
		}
		if err == nil && fmt.Sprintf("%q", m2) != fmt.Sprintf("%q", m) {
			t.Fatalf("round trip: %+v, then %+v", m, m2)
		}
	})
}

func TestAppendFloatMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	vals := []float64{0, -0.0, 1, -1, 0.1, 1e-6, 9.99e-7, 1e20, 1e21, 123456.789, 5e-324, math.MaxFloat64, 1e-10}
	for range 10000 {
		vals = append(vals, math.Float64frombits(r.Uint64()), r.Float64()*math.Pow(10, float64(r.IntN(40)-20)))
	}
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		want, _ := json.Marshal(v)
		if got := appendFloat(nil, v); string(got) != string(want) {
			t.Fatalf("%v: got %s, want %s", v, got, want)
		}
	}
	if got := string(appendFloat(nil, math.NaN())); got != "null" {
		t.Fatalf("NaN: %s", got)
	}
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "bitcoin", `a"b`, `a\b`, "a\nb", "<&>", "é", "\xff", "\u2028"} {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	}
}

func TestMessagesAreValidJSON(t *testing.T) {
	id := json.RawMessage(`"x"`)
	cfg := Config{Heartbeat: 1500 * time.Millisecond, MaxSubscriptions: 10}
	err := &coinpulse.Error{Code: coinpulse.CodeNotFound, Message: `Coin "<x>" was not found.`,
		Details: []coinpulse.FieldError{{Field: "coins[0]", Message: "\x01"}}}
	u := PriceUpdate{CoinID: "a\"b", Symbol: "é", Price: 1e-9, LastUpdated: time.Unix(1, 5).In(time.FixedZone("x", 3600))}
	for k, body := range map[kind][]byte{
		kindWelcome:      welcomeBody(id, "live", &cfg),
		kindSubscribed:   subscriptionBody(nil, ChannelPrices, []string{"a", "b"}, 2),
		kindUnsubscribed: subscriptionBody(id, ChannelAlerts, nil, 0),
		kindPong:         pongBody(id, time.Now()),
		kindError:        errorBody(id, err),
		kindPrices:       append(append([]byte(`,"updates":[`), appendUpdate(nil, &u)...), "]}"...),
	} {
		msg := prefixes[k] + "1" + string(body)
		var m map[string]any
		if err := json.Unmarshal([]byte(msg), &m); err != nil {
			t.Fatalf("%s: %v", msg, err)
		}
	}
	if got := string(errorBody(nil, errors.New("secret"))); got != `,"code":"SERVER_ERROR","message":"An internal error occurred."}` {
		t.Fatalf("plain error: %s", got)
	}
	if got := string(appendTime(nil, u.LastUpdated)); got != `"1970-01-01T00:00:01.000000005Z"` {
		t.Fatalf("time %s", got)
	}
}

// An unknown change, market cap or volume is null in a price update.
func TestAppendUpdateNulls(t *testing.T) {
	v, m := 5e6, 2.0
	u := PriceUpdate{CoinID: "a", Symbol: "a", Price: 1, LastUpdated: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	got := string(appendUpdate(nil, &u))
	if !strings.Contains(got, `"price_change_percentage_24h":null`) || !strings.Contains(got, `"total_volume":null`) || !strings.Contains(got, `"market_cap":null`) {
		t.Errorf("%s", got)
	}
	u.TotalVolume, u.MarketCap = &v, &m
	if got := string(appendUpdate(nil, &u)); !strings.Contains(got, `"total_volume":5000000`) || !strings.Contains(got, `"market_cap":2,`) {
		t.Errorf("%s", got)
	}
}
