package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"coinpulse"
)

// statusOf maps an error kind to its HTTP status: the one place this is
// decided.
func statusOf(code coinpulse.Code) int {
	switch code {
	case coinpulse.CodeInvalidAPIKey:
		return http.StatusUnauthorized
	case coinpulse.CodeExpiredSubscription, coinpulse.CodePermissionDenied,
		coinpulse.CodePortfolioLimitReached, coinpulse.CodeKeyLimitReached:
		return http.StatusForbidden
	case coinpulse.CodeNotFound:
		return http.StatusNotFound
	case coinpulse.CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case coinpulse.CodeConflict:
		return http.StatusConflict
	case coinpulse.CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case coinpulse.CodeValidation:
		return http.StatusUnprocessableEntity
	case coinpulse.CodeRateLimitExceeded:
		return http.StatusTooManyRequests
	case coinpulse.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

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

// newMeta returns the meta every response carries.
func (s *Server) newMeta(r *http.Request) *Meta {
	return &Meta{Timestamp: timestamp(s.clock()), RequestID: requestID(r)}
}

// writeRaw writes a success envelope around already-encoded data.
func writeRaw(w http.ResponseWriter, status int, data []byte, meta *Meta) error {
	m, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	buf := bufPool.Get().(*bytes.Buffer)
	defer bufPool.Put(buf)
	buf.Reset()
	buf.WriteString(`{"success":true,"data":`)
	buf.Write(data)
	buf.WriteString(`,"meta":`)
	buf.Write(m)
	buf.WriteString("}\n")
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, err = w.Write(buf.Bytes())
	return err
}

// writeData encodes data into a success envelope.
func writeData(w http.ResponseWriter, status int, data any, meta *Meta) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return writeRaw(w, status, b, meta)
}

// writeError writes err as the error envelope. Errors that are not
// *coinpulse.Error become SERVER_ERROR and are logged with their cause.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := coinpulse.ErrorCode(err)
	body := errorBody{Error: errorInfo{Code: code, Message: coinpulse.ErrorMessage(err)}, Meta: s.newMeta(r)}
	var e *coinpulse.Error
	if errors.As(err, &e) {
		body.Error.Details = e.Details
	}
	if code == coinpulse.CodeServerError {
		s.log.Error("request failed", "err", err, "method", r.Method, "path", r.URL.Path, "request_id", body.Meta.RequestID)
		body.Error.Message = "An internal error occurred; quote request id " + body.Meta.RequestID + " if you contact support."
	}
	b, _ := json.Marshal(body)
	h := w.Header()
	h.Del("ETag")
	h.Del("Cache-Control")
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(statusOf(code))
	w.Write(append(b, '\n'))
}
