package coinpulse

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Code is an error kind; each maps to one HTTP status (see Code.Status).
type Code string

// The error kinds of the SPEC's table, plus the two that account management
// needs (KEY_LIMIT_REACHED, CONFLICT), ALERT_LIMIT_REACHED, the alerts'
// counterpart of PORTFOLIO_LIMIT_REACHED, REQUEST_TIMEOUT, for a body that
// does not arrive in time, and the five of requests the HTTP server cannot
// read or serve before any endpoint sees them (MALFORMED_REQUEST to
// HTTP_VERSION_NOT_SUPPORTED).
const (
	CodeInvalidAPIKey         Code = "INVALID_API_KEY"
	CodeExpiredSubscription   Code = "EXPIRED_SUBSCRIPTION"
	CodePermissionDenied      Code = "PERMISSION_DENIED"
	CodePortfolioLimitReached Code = "PORTFOLIO_LIMIT_REACHED"
	CodeKeyLimitReached       Code = "KEY_LIMIT_REACHED"
	CodeAlertLimitReached     Code = "ALERT_LIMIT_REACHED"
	CodeNotFound              Code = "RESOURCE_NOT_FOUND"
	CodeMethodNotAllowed      Code = "METHOD_NOT_ALLOWED"
	CodeConflict              Code = "CONFLICT"
	CodePayloadTooLarge       Code = "PAYLOAD_TOO_LARGE"
	CodeRequestTimeout        Code = "REQUEST_TIMEOUT"
	CodeValidation            Code = "VALIDATION_ERROR"
	CodeRateLimitExceeded     Code = "RATE_LIMIT_EXCEEDED"
	CodeServerError           Code = "SERVER_ERROR"
	CodeUnavailable           Code = "SERVICE_UNAVAILABLE"
	CodeMalformedRequest      Code = "MALFORMED_REQUEST"
	CodeExpectationFailed     Code = "EXPECTATION_FAILED"
	CodeHeadersTooLarge       Code = "HEADERS_TOO_LARGE"
	CodeNotImplemented        Code = "NOT_IMPLEMENTED"
	CodeHTTPVersion           Code = "HTTP_VERSION_NOT_SUPPORTED"
)

// FieldError names one invalid input and why.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error is the one error type that crosses package boundaries with a kind.
// Message is safe to show to a subscriber; Err, the cause, is not.
type Error struct {
	Code    Code
	Message string
	Details []FieldError
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error of the given kind with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Count renders n things: "1 portfolio", "5 portfolios".
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// ValidationError returns a VALIDATION_ERROR with one field detail; its
// message names the field.
func ValidationError(field, message string) *Error {
	return &Error{
		Code:    CodeValidation,
		Message: fmt.Sprintf("invalid %s: %s", field, message),
		Details: []FieldError{{Field: field, Message: message}},
	}
}

// ValidationErrors returns one VALIDATION_ERROR with a detail for each of
// details (at least one): its message is that of ValidationError for one,
// and names them all for more ("invalid fields: a, b; see details").
func ValidationErrors(details ...FieldError) *Error {
	if len(details) == 1 {
		return ValidationError(details[0].Field, details[0].Message)
	}
	names := make([]string, len(details))
	for i, fe := range details {
		names[i] = fe.Field
	}
	return &Error{Code: CodeValidation, Message: "invalid fields: " + strings.Join(names, ", ") + "; see details", Details: details}
}

// ErrorCode returns the kind of err: the Code of an *Error in its chain, or
// SERVER_ERROR for anything else (nil gives "").
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeServerError
}

// ErrorMessage returns the subscriber-safe message of err; unknown errors
// give a generic text so that no internals leak.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "An internal error occurred."
}

// IsNotFound reports whether err is of kind RESOURCE_NOT_FOUND.
func IsNotFound(err error) bool { return ErrorCode(err) == CodeNotFound }

// Status is the HTTP status of an error of kind c: the one place this is
// decided (the API and the dashboard both answer with it).
func (c Code) Status() int {
	switch c {
	case CodeInvalidAPIKey:
		return http.StatusUnauthorized
	case CodeExpiredSubscription, CodePermissionDenied,
		CodePortfolioLimitReached, CodeKeyLimitReached,
		CodeAlertLimitReached:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeConflict:
		return http.StatusConflict
	case CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeRequestTimeout:
		return http.StatusRequestTimeout
	case CodeValidation:
		return http.StatusUnprocessableEntity
	case CodeRateLimitExceeded:
		return http.StatusTooManyRequests
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	case CodeMalformedRequest:
		return http.StatusBadRequest
	case CodeExpectationFailed:
		return http.StatusExpectationFailed
	case CodeHeadersTooLarge:
		return http.StatusRequestHeaderFieldsTooLarge
	case CodeNotImplemented:
		return http.StatusNotImplemented
	case CodeHTTPVersion:
		return http.StatusHTTPVersionNotSupported
	}
	return http.StatusInternalServerError
}
