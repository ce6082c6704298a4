package api

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"coinpulse"
)

// maxParams bounds the parameters a query may carry; every endpoint takes
// fewer.
const maxParams = 8

type param struct{ name, value string }

// query is a validated query string: every parameter known and given once.
// It is parsed without maps, since it sits on the hot path.
type query struct {
	params [maxParams]param
	n      int
}

// parseQuery parses rawQuery, accepting only the allowed names. Malformed
// escapes, unknown names and repeated names are VALIDATION_ERRORs.
func parseQuery(rawQuery string, allowed ...string) (query, error) {
	var q query
	for rawQuery != "" {
		var seg string
		seg, rawQuery, _ = strings.Cut(rawQuery, "&")
		if seg == "" {
			continue
		}
		if strings.Contains(seg, ";") {
			return q, partError("query", "The query string is malformed: separate parameters with &, not ;.")
		}
		name, value, _ := strings.Cut(seg, "=")
		var err error
		if name, err = unescape(name); err != nil {
			return q, err
		}
		if value, err = unescape(value); err != nil {
			return q, err
		}
		if !utf8.ValidString(name) || !utf8.ValidString(value) {
			return q, partError("query", "The query string is malformed: it is not UTF-8 once unescaped.")
		}
		if strings.TrimSpace(name) == "" {
			return q, partError("query", fmt.Sprintf("The query string is malformed: %q has no parameter name.", truncate(seg, 50)))
		}
		if !slices.Contains(allowed, name) {
			if len(allowed) == 0 {
				return q, coinpulse.ValidationError(truncate(name, 50), "this endpoint takes no query parameters")
			}
			return q, coinpulse.ValidationError(truncate(name, 50), "unknown parameter; this endpoint takes "+strings.Join(allowed, ", "))
		}
		if _, dup := q.lookup(name); dup {
			return q, coinpulse.ValidationError(name, "given more than once")
		}
		q.params[q.n] = param{name, value} // n < len(allowed) <= maxParams
		q.n++
	}
	return q, nil
}

func unescape(s string) (string, error) {
	if !strings.ContainsAny(s, "%+") {
		return s, nil
	}
	u, err := url.QueryUnescape(s)
	if err != nil {
		return "", partError("query", fmt.Sprintf("The query string is malformed: %s.", err))
	}
	return u, nil
}

func (q *query) lookup(name string) (string, bool) {
	for _, p := range q.params[:q.n] {
		if p.name == name {
			return p.value, true
		}
	}
	return "", false
}

// int returns the integer parameter name, def when absent, or a
// VALIDATION_ERROR naming the range. Only plain decimal digits are an
// integer: no sign, space or leading zero ("+1", " 1" and "01" are
// refused, as a typo may be behind them).
func (q *query) int(name string, def, lo, hi int) (int, error) {
	s, ok := q.lookup(name)
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi || strconv.Itoa(n) != s {
		return 0, coinpulse.ValidationError(name, "must be an integer from "+strconv.Itoa(lo)+" to "+strconv.Itoa(hi))
	}
	return n, nil
}

// cursor reads a list's limit (1 to most; 0 when absent, for all) and
// starting_after (an id, 0 when absent), and returns with them the rows
// to ask the store for: one more than limit, which says whether more
// follow, or -1, the stores' "all". trimPage cuts the rows back to limit.
func (q *query) cursor(most int) (limit int, after int64, ask int, err error) {
	if limit, err = q.int("limit", 0, 1, most); err != nil {
		return 0, 0, 0, err
	}
	n, err := q.int("starting_after", 0, 1, math.MaxInt64)
	if err != nil {
		return 0, 0, 0, err
	}
	ask = -1
	if limit > 0 {
		ask = limit + 1
	}
	return limit, int64(n), ask, nil
}

// trimPage returns the first limit of rows (all when limit is 0) and
// whether more followed them.
func trimPage[T any](rows []T, limit int) ([]T, bool) {
	if limit > 0 && len(rows) > limit {
		return rows[:limit], true
	}
	return rows, false
}

// enum returns the parameter name, def when absent, or a VALIDATION_ERROR
// listing the allowed values.
func (q *query) enum(name, def string, allowed ...string) (string, error) {
	s, ok := q.lookup(name)
	if !ok {
		return def, nil
	}
	if !slices.Contains(allowed, s) {
		return "", coinpulse.ValidationError(name, "must be one of "+strings.Join(allowed, ", "))
	}
	return s, nil
}

func (q *query) str(name string) (string, bool) { return q.lookup(name) }
