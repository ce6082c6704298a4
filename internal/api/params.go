package api

import (
	"net/url"
	"slices"
	"strconv"
	"strings"

	"coinpulse"
)

// query validates a request's query string: every parameter must be known
// and given once.
type query struct {
	values url.Values
}

func parseQuery(rawQuery string, allowed ...string) (query, error) {
	values, err := url.ParseQuery(rawQuery)
	if err != nil {
		return query{}, coinpulse.Errorf(coinpulse.CodeValidation, "The query string is malformed: %s.", err)
	}
	for name, vs := range values {
		if !slices.Contains(allowed, name) {
			if len(allowed) == 0 {
				return query{}, coinpulse.ValidationError(truncate(name, 50), "this endpoint takes no query parameters")
			}
			return query{}, coinpulse.ValidationError(truncate(name, 50), "unknown parameter; this endpoint takes "+strings.Join(allowed, ", "))
		}
		if len(vs) > 1 {
			return query{}, coinpulse.ValidationError(name, "given more than once")
		}
	}
	return query{values: values}, nil
}

// int returns the integer parameter name, def when absent, or a
// VALIDATION_ERROR naming the range.
func (q query) int(name string, def, lo, hi int) (int, error) {
	s, ok := q.values[name]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s[0]))
	if err != nil || n < lo || n > hi {
		return 0, coinpulse.ValidationError(name, "must be an integer from "+strconv.Itoa(lo)+" to "+strconv.Itoa(hi))
	}
	return n, nil
}

// enum returns the parameter name, def when absent, or a VALIDATION_ERROR
// listing the allowed values.
func (q query) enum(name, def string, allowed ...string) (string, error) {
	s, ok := q.values[name]
	if !ok {
		return def, nil
	}
	if !slices.Contains(allowed, s[0]) {
		return "", coinpulse.ValidationError(name, "must be one of "+strings.Join(allowed, ", "))
	}
	return s[0], nil
}

func (q query) str(name string) (string, bool) {
	s, ok := q.values[name]
	if !ok {
		return "", false
	}
	return s[0], true
}
