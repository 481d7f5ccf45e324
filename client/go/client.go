// Package contextfold is the Go client of contextfold: every RPC of its services, typed from
// the protos, plus an Inject helper that takes and returns Bedrock Converse-shaped messages.
//
//	cf, err := contextfold.Dial(contextfold.Options{Address: "localhost:50051"})
//	if err != nil { ... }
//	defer cf.Close()
//	result, err := cf.Inject(ctx, messages, &contextfoldv1.InjectRequest{
//		Memory: &contextfoldv1.MemoryOptions{Stores: []string{"prefs"}},
//	})
//	// result.Messages holds the folded conversation; contextfold.ForModel(result.Messages)
//	// is what the model should see.
//
// Every call gets the client's deadline unless its context has one, carries the API key and the
// latest read-your-writes token (so reads on a read replica see this client's writes), and
// fails with an *Error holding the gRPC status and its decoded google.rpc details. Calls that
// change nothing (NO_SIDE_EFFECTS in the protos: Inject, searches, gets and lists) are tried
// again, up to three attempts within their deadline, when the connection fails them; writes
// never are, since the first attempt may have landed.
package contextfold

import (
	"context"
	"crypto/tls"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"

	contextfoldv1 "contextfold.dev/go/gen/contextfold/v1"
)

// DefaultAddress is where a client connects when neither Options.Address nor
// CONTEXTFOLD_ADDRESS says otherwise.
const DefaultAddress = "localhost:50051"

// DefaultTimeout is the deadline of a unary call whose context has none.
const DefaultTimeout = 10 * time.Second

// Options configure Dial. The zero value connects to CONTEXTFOLD_ADDRESS (else
// localhost:50051) in plaintext, with CONTEXTFOLD_API_KEY when it is set.
type Options struct {
	// Address is "host:port", or any gRPC target ("dns:///contextfold.internal:50051").
	Address string
	// APIKey is sent with every call as "authorization: Bearer <key>".
	APIKey string
	// Timeout is the deadline of a unary call whose context has none; 0 means DefaultTimeout,
	// a negative value none. Streams run until their context ends.
	Timeout time.Duration
	// TLS, when set, secures the connection; nil dials in plaintext (a mesh sidecar, loopback).
	TLS *tls.Config
	// DialOptions are appended to the client's own, so they can override them.
	DialOptions []grpc.DialOption
}

// Client holds one connection and the three services' generated clients.
type Client struct {
	conn *grpc.ClientConn
	// Injection is InjectionService, as generated.
	Injection contextfoldv1.InjectionServiceClient
	// Memory is MemoryService: stores and entries.
	Memory contextfoldv1.MemoryServiceClient
	// Providers is ProviderService: provider registrations.
	Providers contextfoldv1.ProviderServiceClient
}

// Dial connects a Client. The connection is made in the background: Dial fails only on bad
// options, and a server that is down shows as UNAVAILABLE on the calls.
func Dial(options Options) (*Client, error) {
	address := options.Address
	if address == "" {
		address = os.Getenv("CONTEXTFOLD_ADDRESS")
	}
	if address == "" {
		address = DefaultAddress
	}
	apiKey, source := options.APIKey, "Options.APIKey"
	if apiKey == "" {
		apiKey, source = os.Getenv("CONTEXTFOLD_API_KEY"), "CONTEXTFOLD_API_KEY"
	}
	if apiKey != "" {
		if err := checkedKey(apiKey, source); err != nil {
			return nil, err
		}
	}
	timeout := options.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	position := &readPosition{}
	transport := grpc.WithInsecure() //nolint:staticcheck // insecure.NewCredentials needs gRPC-Go 1.34; this works in every release.
	if options.TLS != nil {
		transport = grpc.WithTransportCredentials(credentials.NewTLS(options.TLS))
	}
	dialOptions := []grpc.DialOption{
		transport,
		// A replica that comes back (a rollout) is dialled again within about 50 ms rather than
		// gRPC's default second, so the retry of a read-only call can reach it.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		// Outermost first: errors are decoded once, after the retries, which share the deadline;
		// every attempt carries the latest read-your-writes token.
		grpc.WithChainUnaryInterceptor(decodeUnaryErrors, defaultDeadline(timeout), RetrySafeCalls, position.unary),
		grpc.WithChainStreamInterceptor(decodeStreamErrors, position.stream),
	}
	if apiKey != "" {
		dialOptions = append(dialOptions, grpc.WithPerRPCCredentials(bearer{key: apiKey, secure: options.TLS != nil}))
	}
	conn, err := grpc.DialContext(context.Background(), address, append(dialOptions, options.DialOptions...)...) //nolint:staticcheck // grpc.NewClient needs gRPC-Go 1.63.
	if err != nil {
		return nil, err
	}
	return New(conn), nil
}

// New wraps a connection of your own. Its calls get this package's behaviour (deadline,
// retries, decoded errors) only through the interceptors it was dialled with: RetrySafeCalls
// is exported for that.
func New(conn *grpc.ClientConn) *Client {
	return &Client{
		conn:      conn,
		Injection: contextfoldv1.NewInjectionServiceClient(conn),
		Memory:    contextfoldv1.NewMemoryServiceClient(conn),
		Providers: contextfoldv1.NewProviderServiceClient(conn),
	}
}

// Close closes the connection; calls in flight fail with CANCELLED.
func (c *Client) Close() error {
	return c.conn.Close()
}

// bearer sends the API key with every call.
type bearer struct {
	key    string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.key}, nil
}

// RequireTransportSecurity is false for plaintext connections, which a mesh secures outside
// the process.
func (b bearer) RequireTransportSecurity() bool { return b.secure }

func defaultDeadline(timeout time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply interface{}, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, set := ctx.Deadline(); !set && timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
