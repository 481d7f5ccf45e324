package contextfold

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// Error is how every failed call of a Client fails: the gRPC status and the google.rpc details
// contextfold attaches to it, decoded. It keeps the status, so status.Code(err) and
// status.FromError(err) work as for any gRPC error.
//
//	var cfErr *contextfold.Error
//	if errors.As(err, &cfErr) && cfErr.Code == codes.InvalidArgument {
//		for _, violation := range cfErr.FieldViolations { ... }
//	}
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Message is the service's sentence for people.
	Message string
	// FieldViolations lists each bad field of the request (google.rpc.BadRequest).
	FieldViolations []FieldViolation
	// Resource is what was not found or already exists (google.rpc.ResourceInfo), when named.
	Resource *Resource
	// Reason is the machine-readable cause (google.rpc.ErrorInfo), e.g. "ETAG_MISMATCH".
	Reason string
	status *status.Status
}

// FieldViolation is one bad field of a request: its path ("store.name") and why.
type FieldViolation struct {
	Field       string
	Description string
}

// Resource names the resource an error is about.
type Resource struct {
	Type string
	Name string
}

func (e *Error) Error() string {
	text := fmt.Sprintf("contextfold: %s: %s", StatusName(e.Code), e.Message)
	var said []string
	if e.Reason != "" {
		said = append(said, "reason: "+e.Reason)
	}
	if e.Resource != nil {
		said = append(said, fmt.Sprintf("resource: %s %s", e.Resource.Type, e.Resource.Name))
	}
	for _, violation := range e.FieldViolations {
		said = append(said, violation.Field+": "+violation.Description)
	}
	if len(said) > 0 {
		text += " (" + strings.Join(said, "; ") + ")"
	}
	return text
}

// GRPCStatus is the status the service sent, details included.
func (e *Error) GRPCStatus() *status.Status { return e.status }

// StatusName is a code's canonical name: "INVALID_ARGUMENT", "NOT_FOUND", …
func StatusName(code codes.Code) string {
	var name strings.Builder
	for i, letter := range code.String() {
		if i > 0 && letter >= 'A' && letter <= 'Z' {
			name.WriteByte('_')
		}
		name.WriteRune(letter)
	}
	return strings.ToUpper(name.String())
}

// decode turns a call's error into an *Error; nil, io.EOF (a stream's end) and errors that
// carry no status stay as they are.
func decode(err error) error {
	var decoded *Error
	if err == nil || err == io.EOF || errors.As(err, &decoded) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		err = status.FromContextError(err).Err()
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	decoded = &Error{Code: st.Code(), Message: st.Message(), status: st}
	for _, detail := range st.Proto().GetDetails() {
		switch detail.GetTypeUrl() {
		case "type.googleapis.com/google.rpc.BadRequest":
			decoded.FieldViolations = append(decoded.FieldViolations, fieldViolations(detail.GetValue())...)
		case "type.googleapis.com/google.rpc.ResourceInfo":
			fields := stringFields(detail.GetValue())
			decoded.Resource = &Resource{Type: fields[1], Name: fields[2]}
		case "type.googleapis.com/google.rpc.ErrorInfo":
			decoded.Reason = stringFields(detail.GetValue())[1]
		}
	}
	return decoded
}

// The details are read off the wire by field number (google/rpc/error_details.proto), so the
// client needs no generated google.rpc package and never clashes with the one an application
// links. Fields of other wire types are skipped; a malformed detail yields what came before it.

// fieldViolations reads BadRequest: field_violations = 1, each {field = 1, description = 2}.
func fieldViolations(message []byte) []FieldViolation {
	var violations []FieldViolation
	for _, violation := range bytesFields(message)[1] {
		fields := stringFields(violation)
		violations = append(violations, FieldViolation{Field: fields[1], Description: fields[2]})
	}
	return violations
}

// stringFields is the last value of each length-delimited field of a message, as text.
func stringFields(message []byte) map[protowire.Number]string {
	fields := map[protowire.Number]string{}
	for number, values := range bytesFields(message) {
		fields[number] = string(values[len(values)-1])
	}
	return fields
}

// bytesFields is every length-delimited field of a message, by number, in order.
func bytesFields(message []byte) map[protowire.Number][][]byte {
	fields := map[protowire.Number][][]byte{}
	for len(message) > 0 {
		number, kind, n := protowire.ConsumeTag(message)
		if n < 0 {
			return fields
		}
		message = message[n:]
		if kind == protowire.BytesType {
			value, m := protowire.ConsumeBytes(message)
			if m < 0 {
				return fields
			}
			fields[number] = append(fields[number], value)
			n = m
		} else {
			n = protowire.ConsumeFieldValue(number, kind, message)
			if n < 0 {
				return fields
			}
		}
		message = message[n:]
	}
	return fields
}

func decodeUnaryErrors(ctx context.Context, method string, req, reply interface{}, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return decode(invoker(ctx, method, req, reply, cc, opts...))
}

func decodeStreamErrors(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	stream, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, decode(err)
	}
	return decodingStream{stream}, nil
}

// decodingStream decodes the errors a stream's messages fail with.
type decodingStream struct{ grpc.ClientStream }

func (s decodingStream) SendMsg(m interface{}) error { return decode(s.ClientStream.SendMsg(m)) }
func (s decodingStream) RecvMsg(m interface{}) error { return decode(s.ClientStream.RecvMsg(m)) }
func (s decodingStream) CloseSend() error            { return decode(s.ClientStream.CloseSend()) }
