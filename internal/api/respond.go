package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"coinpulse"
)

// Meta is the meta object of every response. Optional fields are left
// out when empty.
type Meta struct {
	Timestamp string `json:"timestamp"`
	RequestID string `json:"request_id"`

	AsOf           string   `json:"as_of,omitempty"`
	Snapshot       string   `json:"snapshot,omitempty"`
	Feed           string   `json:"feed,omitempty"`
	Simulated      *bool    `json:"simulated,omitempty"`
	Query          string   `json:"query,omitempty"`
	MinMoverVolume *float64 `json:"min_volume_24h,omitempty"`

	CurrentPage  *int `json:"current_page,omitempty"`
	TotalPages   *int `json:"total_pages,omitempty"`
	TotalResults *int `json:"total_results,omitempty"`
	Page         *int `json:"page,omitempty"`
	PerPage      *int `json:"per_page,omitempty"`
	Total        *int `json:"total,omitempty"`
	// HasMore says whether more items follow this page (transactions).
	HasMore *bool `json:"has_more,omitempty"`
	// UnknownIDs are the ids of GET /markets?ids= that name no coin.
	UnknownIDs []string `json:"unknown_ids,omitempty"`
}

type errorBody struct {
	Success bool      `json:"success"`
	Error   errorInfo `json:"error"`
	Meta    *Meta     `json:"meta"`
}

type errorInfo struct {
	Code    coinpulse.Code         `json:"code"`
	Message string                 `json:"message"`
	Details []coinpulse.FieldError `json:"details,omitempty"`
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// stamp is the formatted current time, kept per millisecond: under load
// many responses share one.
type stamp struct {
	ms int64
	s  string
}

var lastStamp atomic.Pointer[stamp]

func nowStamp(t time.Time) string {
	ms := t.UnixMilli()
	if st := lastStamp.Load(); st != nil && st.ms == ms {
		return st.s
	}
	st := &stamp{ms: ms, s: timestamp(t)}
	lastStamp.Store(st)
	return st.s
}

// newMeta returns the meta every response carries.
func (s *Server) newMeta(w http.ResponseWriter) Meta {
	return Meta{Timestamp: nowStamp(s.clock()), RequestID: exchangeOf(w).id}
}

// appendJSON appends m as a JSON object, fields in declaration order,
// empty optional fields left out: the same bytes encoding/json gives,
// without its reflection on the hot path.
func (m *Meta) appendJSON(b []byte) []byte {
	str := func(b []byte, name, v string) []byte {
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		q, _ := json.Marshal(v)
		return append(b, q...)
	}
	// Timestamps, request ids, snapshot ids and feed names need no escaping.
	safe := func(b []byte, name, v string) []byte {
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':', '"')
		b = append(b, v...)
		return append(b, '"')
	}
	num := func(b []byte, name string, v *int) []byte {
		if v == nil {
			return b
		}
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		return strconv.AppendInt(b, int64(*v), 10)
	}
	b = append(b, `{"timestamp":"`...)
	b = append(b, m.Timestamp...)
	b = append(b, `","request_id":"`...)
	b = append(b, m.RequestID...)
	b = append(b, '"')
	if m.AsOf != "" {
		b = safe(b, "as_of", m.AsOf)
	}
	if m.Snapshot != "" {
		b = safe(b, "snapshot", m.Snapshot)
	}
	if m.Feed != "" {
		b = str(b, "feed", m.Feed)
	}
	if m.Simulated != nil {
		b = append(b, `,"simulated":`...)
		b = strconv.AppendBool(b, *m.Simulated)
	}
	if m.Query != "" {
		b = str(b, "query", m.Query)
	}
	if m.MinMoverVolume != nil {
		b = append(b, `,"min_volume_24h":`...)
		f, _ := json.Marshal(*m.MinMoverVolume)
		b = append(b, f...)
	}
	b = num(b, "current_page", m.CurrentPage)
	b = num(b, "total_pages", m.TotalPages)
	b = num(b, "total_results", m.TotalResults)
	b = num(b, "page", m.Page)
	b = num(b, "per_page", m.PerPage)
	b = num(b, "total", m.Total)
	if m.HasMore != nil {
		b = append(b, `,"has_more":`...)
		b = strconv.AppendBool(b, *m.HasMore)
	}
	if len(m.UnknownIDs) > 0 {
		q, _ := json.Marshal(m.UnknownIDs)
		b = append(b, `,"unknown_ids":`...)
		b = append(b, q...)
	}
	return append(b, '}')
}

var (
	hdrJSON = []string{"application/json; charset=utf-8"}
)

// smallBody is the most net/http buffers before it commits to a response
// (its bufferBeforeChunkingSize): a body of at most this size, written in
// one Write by a handler that then returns, gets its Content-Length from
// net/http itself, outside the header map. Leaving the entry out of the map
// saves each such answer a map entry, which counts: past 8 entries Go's map
// allocates a table, and net/http clones and sorts the map (bench/README.md,
// limits). Larger bodies set it, or net/http would send them chunked.
const smallBody = 2048

// writeRaw writes a success envelope around already-encoded data.
func writeRaw(w http.ResponseWriter, status int, data []byte, meta *Meta) error {
	buf := bufPool.Get().(*bytes.Buffer)
	defer bufPool.Put(buf)
	buf.Reset()
	buf.WriteString(envelopeHead)
	buf.Write(data)
	buf.WriteString(envelopeMid)
	buf.Write(meta.appendJSON(buf.AvailableBuffer()))
	buf.WriteString(envelopeEnd)
	h := w.Header()
	h["Content-Type"] = hdrJSON
	if buf.Len() > smallBody {
		h["Content-Length"] = []string{strconv.Itoa(buf.Len())}
	}
	return writeBody(w, status, buf.Bytes())
}

// writeData encodes data into a success envelope.
func writeData(w http.ResponseWriter, status int, data any, meta *Meta) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return writeRaw(w, status, b, meta)
}

// unreachable reports whether err comes from a connection that could not
// be made or broke (refused, reset, cut mid-answer), a database locked by
// another, or a service that did not answer within the time the server
// gives it (a context's deadline; writeError asks this only of a request
// whose client is still there): the database down, failing over or busy,
// not a fault of the request or the code.
// PostgreSQL's refusals of that kind (pgx's PgError has SQLState) count
// too: a server starting or shutting down (a failover), too many
// connections, a connection exception; and so does every new connection
// the server refused, whatever it said (pgconn.ConnectError): a database
// not accepting connections (ALTER DATABASE … ALLOW_CONNECTIONS false,
// 55000), dropped or renamed (3D000), or a login pg_hba.conf or a changed
// password now refuses (28000, 28P01).
func unreachable(err error) bool {
	var op *net.OpError
	var connect *pgconn.ConnectError
	if errors.As(err, &op) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &connect) {
		return true
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		switch st := pg.SQLState(); {
		case st == "57P01", st == "57P02", st == "57P03", st == "53300", strings.HasPrefix(st, "08"):
			return true
		}
	}
	// SQLite's SQLITE_BUSY and SQLITE_LOCKED (primary codes 5 and 6): the
	// database file stayed locked by another connection or process past
	// the busy timeout.
	var lite interface{ Code() int }
	if errors.As(err, &lite) {
		switch lite.Code() & 0xff {
		case 5, 6:
			return true
		}
	}
	return false
}

// writeError writes err as the error envelope. Errors that are not
// *coinpulse.Error become SERVER_ERROR and are logged with their cause.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := coinpulse.ErrorCode(err)
	m := s.newMeta(w)
	body := errorBody{Error: errorInfo{Code: code, Message: coinpulse.ErrorMessage(err)}, Meta: &m}
	var e *coinpulse.Error
	if errors.As(err, &e) {
		body.Error.Details = e.Details
	}
	if code == coinpulse.CodeValidation && len(body.Error.Details) == 0 {
		// Clients may read details on every VALIDATION_ERROR.
		body.Error.Details = []coinpulse.FieldError{{Field: "request", Message: body.Error.Message}}
	}
	if code == coinpulse.CodeServerError && unreachable(err) && r.Context().Err() == nil { // not a client that left
		// The database (or another service) could not be reached: the
		// caller may try again, as /readyz tells the load balancer.
		s.log.Error("request failed: a service does not answer", "err", err, "method", r.Method, "path", r.URL.Path, "request_id", body.Meta.RequestID)
		code = coinpulse.CodeUnavailable
		body.Error.Code = code
		body.Error.Message = "The service's database does not answer; try again in a moment (request id " + body.Meta.RequestID + ")."
		w.Header().Set("Retry-After", "1")
		goto write
	}
	if code == coinpulse.CodeServerError {
		if errors.Is(err, errSimulated) {
			body.Error.Message = "Simulated (X-Sandbox-Simulate: server_error): an internal error occurred; quote request id " + body.Meta.RequestID + " if you contact support."
			goto write
		}
		s.log.Error("request failed", "err", err, "method", r.Method, "path", r.URL.Path, "request_id", body.Meta.RequestID)
		body.Error.Message = "An internal error occurred; quote request id " + body.Meta.RequestID + " if you contact support."
	}
write:
	b, _ := json.Marshal(body)
	h := w.Header()
	h.Del("ETag")
	h.Del("Cache-Control")
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	if code == coinpulse.CodeUnavailable && h.Get("Retry-After") == "" {
		h.Set("Retry-After", "5") // every 503 says when to retry: market data loading
	}
	if code.Status() == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="coinpulse"`) // RFC 9110 §15.5.2
	}
	writeBody(w, code.Status(), append(b, '\n'))
}
