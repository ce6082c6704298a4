package stream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"coinpulse"
)

// The client message types.
const (
	TypeAuth        = "auth"
	TypeSubscribe   = "subscribe"
	TypeUnsubscribe = "unsubscribe"
	TypePing        = "ping"
)

// The channels a connection can subscribe to.
const (
	ChannelPrices = "prices"
	ChannelAlerts = "alerts"
)

// Limits of one client message.
const (
	// MaxMessageBytes is the largest client message that is parsed. A
	// larger one, up to HardMessageBytes, is read, discarded and answered
	// with a PAYLOAD_TOO_LARGE error.
	MaxMessageBytes = 16 << 10
	// HardMessageBytes is the read limit of the WebSocket library: a
	// message larger than this closes the connection with status 1009
	// (message too big), without an error message.
	HardMessageBytes = 64 << 10
	// MaxCoinsPerMessage is the most entries a "coins" array may have.
	MaxCoinsPerMessage = 1000
	// MaxCoinLength is the longest coin id or symbol, in characters.
	MaxCoinLength = 100
	// MaxIDLength is the longest "id", in bytes of its JSON text.
	MaxIDLength = 128
	// MaxAPIKeyLength is the longest "api_key", in bytes.
	MaxAPIKeyLength = 256
)

// ClientMessage is one parsed client message. Fields a message does not
// carry are zero.
type ClientMessage struct {
	// Type is TypeAuth, TypeSubscribe, TypeUnsubscribe or TypePing.
	Type string
	// ID is the optional "id" exactly as sent (a JSON string or number,
	// nil when absent); replies to the message echo it.
	ID json.RawMessage
	// APIKey is the key of an auth message.
	APIKey string
	// Channel is ChannelPrices or ChannelAlerts (subscribe, unsubscribe).
	Channel string
	// Coins are the coin ids or symbols of a prices (un)subscription, as
	// sent; nil when absent (an unsubscribe from prices without coins
	// means all of them).
	Coins []string
}

// field bits, to find duplicates.
const (
	fType = 1 << iota
	fID
	fAPIKey
	fChannel
	fCoins
)

// ParseClientMessage parses and validates one client message: a single
// JSON object whose field names are exactly those of the protocol (no
// unknown, duplicate or differently cased fields), with the right JSON
// types and the fields its type needs and no others:
//
//   - auth: api_key (1..256 bytes).
//   - subscribe: channel "prices" with coins (1..1000 entries of 1..100
//     characters each), or channel "alerts" without coins.
//   - unsubscribe: like subscribe, but coins may be left out to leave
//     every coin.
//   - ping: nothing else.
//
// Every type takes an optional id (a JSON string or number, at most 128
// bytes of JSON text). Errors are *coinpulse.Error of kind
// VALIDATION_ERROR (PAYLOAD_TOO_LARGE above MaxMessageBytes) whose
// message is safe to send to the client. On error the returned message
// holds what was read before the problem, and ID wherever in the message
// a valid one is, so that the error reply can still echo it.
func ParseClientMessage(data []byte) (ClientMessage, error) {
	if len(data) > MaxMessageBytes {
		return ClientMessage{}, errTooLarge()
	}
	m, err := parseClientMessage(data)
	if err != nil && m.ID == nil {
		m.ID = idOf(data)
	}
	return m, err
}

// idOf returns the valid "id" of the object data, or nil: for an error
// found before the parse reached it. It reads up to the id, skipping
// other fields whatever their values.
func idOf(data []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	for dec.More() {
		tok, err := dec.Token()
		if key, ok := tok.(string); err != nil || !ok {
			return nil
		} else if key == "id" {
			id, err := idValue(dec)
			if err != nil {
				return nil
			}
			return id
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return nil
		}
	}
	return nil
}

func parseClientMessage(data []byte) (ClientMessage, error) {
	var m ClientMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return m, syntaxError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return m, invalid("message", "must be a JSON object")
	}
	var seen int
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return m, syntaxError(err)
		}
		key, ok := tok.(string)
		if !ok {
			return m, syntaxError(nil)
		}
		var bit int
		switch key {
		case "type":
			bit = fType
		case "id":
			bit = fID
		case "api_key":
			bit = fAPIKey
		case "channel":
			bit = fChannel
		case "coins":
			bit = fCoins
		default:
			return m, invalid(quoteField(key), "is not a known field; the fields are type, id, api_key, channel and coins")
		}
		if seen&bit != 0 {
			return m, invalid(key, "appears more than once")
		}
		seen |= bit
		switch bit {
		case fType:
			m.Type, err = stringValue(dec, key)
		case fID:
			m.ID, err = idValue(dec)
		case fAPIKey:
			m.APIKey, err = stringValue(dec, key)
		case fChannel:
			m.Channel, err = stringValue(dec, key)
		case fCoins:
			m.Coins, err = coinsValue(dec)
		}
		if err != nil {
			return m, err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return m, syntaxError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err != nil {
			return m, syntaxError(err)
		}
		return m, invalid("message", "must be a single JSON object, with nothing after it")
	}
	return m, m.validate(seen)
}

// validate checks the fields against the message type.
func (m *ClientMessage) validate(seen int) error {
	allowed := 0
	switch m.Type {
	case "":
		if seen&fType == 0 {
			return invalid("type", "is required")
		}
		return invalid("type", "must be one of auth, subscribe, unsubscribe, ping")
	case TypeAuth:
		allowed = fAPIKey
		if seen&fAPIKey == 0 {
			return invalid("api_key", "is required in an auth message")
		}
		if m.APIKey == "" {
			return invalid("api_key", "must not be empty")
		}
		if len(m.APIKey) > MaxAPIKeyLength {
			return invalid("api_key", fmt.Sprintf("must be at most %d bytes", MaxAPIKeyLength))
		}
	case TypeSubscribe, TypeUnsubscribe:
		allowed = fChannel | fCoins
		switch m.Channel {
		case ChannelPrices:
			if m.Type == TypeSubscribe && seen&fCoins == 0 {
				return invalid("coins", "is required to subscribe to prices")
			}
		case ChannelAlerts:
			if seen&fCoins != 0 {
				return invalid("coins", "is not allowed with the alerts channel")
			}
		case "":
			if seen&fChannel == 0 {
				return invalid("channel", "is required")
			}
			fallthrough
		default:
			return invalid("channel", "must be prices or alerts")
		}
	case TypePing:
	default:
		return invalid("type", "must be one of auth, subscribe, unsubscribe, ping")
	}
	extra := seen &^ (allowed | fType | fID)
	for _, f := range []struct {
		bit  int
		name string
	}{{fAPIKey, "api_key"}, {fChannel, "channel"}, {fCoins, "coins"}} {
		if extra&f.bit != 0 {
			return invalid(f.name, "is not allowed in a "+m.Type+" message")
		}
	}
	return nil
}

// stringValue reads a JSON string.
func stringValue(dec *json.Decoder, field string) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", syntaxError(err)
	}
	s, ok := tok.(string)
	if !ok {
		return "", invalid(field, "must be a string")
	}
	return s, nil
}

// idValue reads the id: a JSON string or number, kept as JSON text.
func idValue(dec *json.Decoder) (json.RawMessage, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxError(err)
	}
	var raw []byte
	switch v := tok.(type) {
	case string:
		raw, _ = json.Marshal(v)
	case json.Number:
		raw = []byte(v)
	default:
		return nil, invalid("id", "must be a string or a number")
	}
	if len(raw) > MaxIDLength {
		return nil, invalid("id", fmt.Sprintf("must be at most %d bytes of JSON", MaxIDLength))
	}
	return raw, nil
}

// coinsValue reads the coins array.
func coinsValue(dec *json.Decoder) ([]string, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, invalid("coins", "must be an array of coin ids or symbols")
	}
	coins := []string{}
	for dec.More() {
		field := "coins[" + strconv.Itoa(len(coins)) + "]"
		if len(coins) == MaxCoinsPerMessage {
			return nil, invalid("coins", fmt.Sprintf("must have at most %d entries", MaxCoinsPerMessage))
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxError(err)
		}
		s, ok := tok.(string)
		if !ok {
			return nil, invalid(field, "must be a string")
		}
		if s == "" {
			return nil, invalid(field, "must not be empty")
		}
		if utf8.RuneCountInString(s) > MaxCoinLength {
			return nil, invalid(field, fmt.Sprintf("must be at most %d characters", MaxCoinLength))
		}
		coins = append(coins, s)
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return nil, syntaxError(err)
	}
	if len(coins) == 0 {
		return nil, invalid("coins", "must have at least one entry")
	}
	return coins, nil
}

// invalid is a VALIDATION_ERROR about one field: its message reads
// "\"coins\" must be …." and its detail carries the field and the reason.
func invalid(field, message string) error {
	text := strconv.QuoteToGraphic(field) + " " + message + "."
	if field == "message" {
		text = "The message " + message + "."
	}
	return &coinpulse.Error{Code: coinpulse.CodeValidation, Message: text,
		Details: []coinpulse.FieldError{{Field: field, Message: message}}}
}

func errTooLarge() error {
	return coinpulse.Errorf(coinpulse.CodePayloadTooLarge, "The message is larger than %d bytes.", MaxMessageBytes)
}

// syntaxError reports malformed JSON; err is the decoder's error (nil:
// a token where it cannot be).
func syntaxError(err error) error {
	msg := "The message is not valid JSON."
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		msg = fmt.Sprintf("The message is not valid JSON (at byte %d).", se.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		msg = "The message is not valid JSON (it ends too early)."
	}
	return &coinpulse.Error{Code: coinpulse.CodeValidation, Message: msg,
		Details: []coinpulse.FieldError{{Field: "message", Message: "is not valid JSON"}}}
}

// quoteField shortens an unknown field's name to 40 characters.
func quoteField(s string) string {
	if utf8.RuneCountInString(s) > 40 {
		s = string([]rune(s)[:40]) + "…"
	}
	return s
}
