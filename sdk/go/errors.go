package sandboxd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is what the daemon reported: its code (a gRPC status name such as "NOT_FOUND", or the
// REST body's code such as "CONFLICT"), its message, and the HTTP status for REST errors.
// Compare with errors.Is against the Err* sentinels.
type Error struct {
	Code       string
	Message    string
	HTTPStatus int
}

func (e *Error) Error() string {
	if e.HTTPStatus != 0 {
		return fmt.Sprintf("%s: %s (HTTP %d)", e.Code, e.Message, e.HTTPStatus)
	}
	return e.Code + ": " + e.Message
}

// Is matches a sentinel of the same kind: errors.Is(err, sandboxd.ErrNotFound).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && kindOf(t.Code) == kindOf(e.Code)
}

// The kinds of errors, for errors.Is. An Error matches the sentinel of its code; codes that
// mean the same over gRPC and REST share one (ALREADY_EXISTS and CONFLICT, ...).
var (
	ErrNotFound            = &Error{Code: "NOT_FOUND"}
	ErrPermissionDenied    = &Error{Code: "PERMISSION_DENIED"}
	ErrInvalidArgument     = &Error{Code: "INVALID_ARGUMENT"}
	ErrConflict            = &Error{Code: "CONFLICT"}
	ErrFailedPrecondition  = &Error{Code: "FAILED_PRECONDITION"}
	ErrPayloadTooLarge     = &Error{Code: "PAYLOAD_TOO_LARGE"}
	ErrInsufficientStorage = &Error{Code: "INSUFFICIENT_STORAGE"}
	ErrResourceExhausted   = &Error{Code: "RESOURCE_EXHAUSTED"}
	ErrUnauthenticated     = &Error{Code: "UNAUTHENTICATED"}
	ErrUnavailable         = &Error{Code: "UNAVAILABLE"}
	ErrUnimplemented       = &Error{Code: "UNIMPLEMENTED"}
	ErrDeadlineExceeded    = &Error{Code: "DEADLINE_EXCEEDED"}
	ErrCanceled            = &Error{Code: "CANCELLED"}
	ErrInternal            = &Error{Code: "INTERNAL"}
)

func kindOf(code string) string {
	switch code {
	case "ALREADY_EXISTS", "ABORTED":
		return "CONFLICT"
	case "OUT_OF_RANGE":
		return "INVALID_ARGUMENT"
	case "METHOD_NOT_ALLOWED":
		return "UNIMPLEMENTED"
	case "UNKNOWN", "DATA_LOSS":
		return "INTERNAL"
	}
	return code
}

var httpCodes = map[int]string{
	400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
	405: "METHOD_NOT_ALLOWED", 409: "CONFLICT", 413: "PAYLOAD_TOO_LARGE", 416: "OUT_OF_RANGE",
	503: "UNAVAILABLE", 507: "INSUFFICIENT_STORAGE",
}

// httpError reads a REST error: the JSON body's code and message when there is one.
func httpError(status int, body []byte) error {
	var doc struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &doc)
	if doc.Code == "" {
		doc.Code = httpCodes[status]
		if doc.Code == "" {
			doc.Code = "UNKNOWN"
			if status >= 500 {
				doc.Code = "INTERNAL"
			}
		}
	}
	if doc.Message == "" {
		doc.Message = strings.TrimSpace(string(body))
		if doc.Message == "" {
			doc.Message = http.StatusText(status)
		}
	}
	return &Error{Code: doc.Code, Message: doc.Message, HTTPStatus: status}
}

// grpcError turns a gRPC status (or a context error) into an *Error.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: "DEADLINE_EXCEEDED", Message: err.Error()}
	}
	if errors.Is(err, context.Canceled) {
		return &Error{Code: "CANCELLED", Message: err.Error()}
	}
	s, ok := status.FromError(err)
	if !ok {
		return &Error{Code: "UNAVAILABLE", Message: err.Error()}
	}
	code := strings.ToUpper(codeName(s.Code()))
	return &Error{Code: code, Message: s.Message()}
}

func codeName(c codes.Code) string {
	switch c {
	case codes.Canceled:
		return "CANCELLED"
	case codes.InvalidArgument:
		return "INVALID_ARGUMENT"
	case codes.DeadlineExceeded:
		return "DEADLINE_EXCEEDED"
	case codes.NotFound:
		return "NOT_FOUND"
	case codes.AlreadyExists:
		return "ALREADY_EXISTS"
	case codes.PermissionDenied:
		return "PERMISSION_DENIED"
	case codes.ResourceExhausted:
		return "RESOURCE_EXHAUSTED"
	case codes.FailedPrecondition:
		return "FAILED_PRECONDITION"
	case codes.Aborted:
		return "ABORTED"
	case codes.OutOfRange:
		return "OUT_OF_RANGE"
	case codes.Unimplemented:
		return "UNIMPLEMENTED"
	case codes.Internal:
		return "INTERNAL"
	case codes.Unavailable:
		return "UNAVAILABLE"
	case codes.DataLoss:
		return "DATA_LOSS"
	case codes.Unauthenticated:
		return "UNAUTHENTICATED"
	}
	return "UNKNOWN"
}

// transportError wraps a failure to reach the REST API.
func transportError(op string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: "DEADLINE_EXCEEDED", Message: op + ": " + err.Error()}
	}
	if errors.Is(err, context.Canceled) {
		return &Error{Code: "CANCELLED", Message: op + ": " + err.Error()}
	}
	return &Error{Code: "UNAVAILABLE", Message: op + ": " + err.Error()}
}
