package contextfold

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// ReadAfterHeader carries read-your-writes tokens. A call that wrote answers with one in its
// trailer (its commit's place in the database's log, sealed); sent with later calls, it keeps
// their reads from a read replica that has not caught up with it. Tokens are opaque, of one
// length: the greater text is the later write.
const ReadAfterHeader = "x-contextfold-read-after"

// longestToken bounds what a trailer may hand the client to send again.
const longestToken = 256

// readPosition is the latest token a Client was given, sent with each of its calls.
type readPosition struct {
	mu     sync.Mutex
	latest string
}

func (p *readPosition) outgoing(ctx context.Context) context.Context {
	p.mu.Lock()
	latest := p.latest
	p.mu.Unlock()
	if latest == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, ReadAfterHeader, latest)
}

func (p *readPosition) note(trailer metadata.MD) {
	for _, token := range trailer.Get(ReadAfterHeader) {
		p.mu.Lock()
		if len(token) > 0 && len(token) <= longestToken && token > p.latest {
			p.latest = token
		}
		p.mu.Unlock()
	}
}

func (p *readPosition) unary(ctx context.Context, method string, req, reply interface{}, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var trailer metadata.MD
	err := invoker(p.outgoing(ctx), method, req, reply, cc, append(opts, grpc.Trailer(&trailer))...)
	p.note(trailer)
	return err
}

func (p *readPosition) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	stream, err := streamer(p.outgoing(ctx), desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &notingStream{ClientStream: stream, position: p, serverStreams: desc.ServerStreams}, nil
}

// notingStream notes the token a stream's trailer carries, once the stream has ended.
type notingStream struct {
	grpc.ClientStream
	position      *readPosition
	serverStreams bool
}

func (s *notingStream) RecvMsg(m interface{}) error {
	err := s.ClientStream.RecvMsg(m)
	// A single answer (ImportMemories) ends the stream; a server stream ends with io.EOF.
	if (err == nil && !s.serverStreams) || err == io.EOF {
		s.position.note(s.ClientStream.Trailer())
	}
	return err
}
