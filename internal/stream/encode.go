package stream

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"time"

	"coinpulse"
)

// kind is the type of a server message. Each message is written as the
// kind's prefix, the connection's next sequence number and the message's
// body: the rest of the object, either `}` or `,"field":…}`.
type kind uint8

const (
	kindWelcome kind = iota
	kindSubscribed
	kindUnsubscribed
	kindPrices
	kindAlert
	kindHeartbeat
	kindPong
	kindError
	kindClose // not a message: close the connection after what is queued
)

var prefixes = [...]string{
	kindWelcome:      `{"type":"welcome","sequence":`,
	kindSubscribed:   `{"type":"subscribed","sequence":`,
	kindUnsubscribed: `{"type":"unsubscribed","sequence":`,
	kindPrices:       `{"type":"prices","sequence":`,
	kindAlert:        `{"type":"alert.triggered","sequence":`,
	kindHeartbeat:    `{"type":"heartbeat","sequence":`,
	kindPong:         `{"type":"pong","sequence":`,
	kindError:        `{"type":"error","sequence":`,
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendFloat appends f as encoding/json does (so that the numbers are
// the REST API's); NaN and infinities, which JSON lacks, become null.
func appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendTime appends t in UTC as a quoted RFC 3339 time with as many
// fraction digits as needed, like encoding/json (the REST API's
// last_updated).
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendStamp appends t in UTC as a quoted ISO 8601 time with
// milliseconds, like the REST API's meta timestamps.
func appendStamp(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	return append(b, '"')
}

// appendID appends `,"id":<id>` when the client gave an id.
func appendID(b []byte, id json.RawMessage) []byte {
	if id == nil {
		return b
	}
	b = append(b, `,"id":`...)
	return append(b, id...)
}

// appendNullable appends *v, or null.
func appendNullable(b []byte, v *float64) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	return appendFloat(b, *v)
}

// appendUpdate appends one element of a prices message's updates.
func appendUpdate(b []byte, u *PriceUpdate) []byte {
	b = append(b, `{"coin_id":`...)
	b = appendString(b, u.CoinID)
	b = append(b, `,"symbol":`...)
	b = appendString(b, u.Symbol)
	b = append(b, `,"price":`...)
	b = appendFloat(b, u.Price)
	b = append(b, `,"price_change_percentage_24h":`...)
	b = appendNullable(b, u.PriceChangePercentage24h)
	b = append(b, `,"market_cap":`...)
	b = appendNullable(b, u.MarketCap)
	b = append(b, `,"total_volume":`...)
	b = appendNullable(b, u.TotalVolume)
	b = append(b, `,"last_updated":`...)
	b = appendTime(b, u.LastUpdated)
	return append(b, '}')
}

// welcomeBody is the body of the welcome message.
func welcomeBody(id json.RawMessage, mode string, cfg *Config) []byte {
	b := appendID(nil, id)
	b = append(b, `,"mode":`...)
	b = appendString(b, mode)
	b = append(b, `,"heartbeat_interval_seconds":`...)
	hb := cfg.Heartbeat
	if hb < 0 {
		hb = 0
	}
	b = appendFloat(b, hb.Seconds())
	b = append(b, `,"max_subscriptions":`...)
	b = strconv.AppendInt(b, int64(cfg.MaxSubscriptions), 10)
	b = append(b, `,"max_message_bytes":`...)
	b = strconv.AppendInt(b, MaxMessageBytes, 10)
	return append(b, '}')
}

// subscriptionBody is the body of subscribed and unsubscribed: the
// channel and, for prices, the coin ids named and how many coins the
// connection now follows.
func subscriptionBody(id json.RawMessage, channel string, coins []string, count int) []byte {
	b := appendID(nil, id)
	b = append(b, `,"channel":`...)
	b = appendString(b, channel)
	if channel == ChannelPrices {
		b = append(b, `,"coins":[`...)
		for i, c := range coins {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, c)
		}
		b = append(b, `],"subscription_count":`...)
		b = strconv.AppendInt(b, int64(count), 10)
	}
	return append(b, '}')
}

// pongBody is the body of a pong.
func pongBody(id json.RawMessage, now time.Time) []byte {
	b := appendID(nil, id)
	b = append(b, `,"time":`...)
	b = appendStamp(b, now)
	return append(b, '}')
}

// maxDetails bounds the details of one error message.
const maxDetails = 100

// errorBody is the body of an error message: err's code, its
// subscriber-safe message and its details.
func errorBody(id json.RawMessage, err error) []byte {
	b := appendID(nil, id)
	b = append(b, `,"code":`...)
	b = appendString(b, string(coinpulse.ErrorCode(err)))
	b = append(b, `,"message":`...)
	b = appendString(b, coinpulse.ErrorMessage(err))
	var e *coinpulse.Error
	if errors.As(err, &e) && len(e.Details) > 0 {
		b = append(b, `,"details":[`...)
		for i, d := range e.Details {
			if i == maxDetails {
				break
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"field":`...)
			b = appendString(b, d.Field)
			b = append(b, `,"message":`...)
			b = appendString(b, d.Message)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}
