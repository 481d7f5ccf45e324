package contextfold

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	contextfoldv1 "contextfold.dev/go/gen/contextfold/v1"
)

const (
	attempts     = 3
	firstBackoff = 50 * time.Millisecond
)

// safeToRepeat holds the full names ("/contextfold.v1.MemoryService/SearchMemories") of the
// methods the protos mark `idempotency_level = NO_SIDE_EFFECTS`, read from the generated
// descriptors so the list is said once, in the protos.
var safeToRepeat = func() map[string]bool {
	safe := map[string]bool{}
	files := []protoreflect.FileDescriptor{
		contextfoldv1.File_contextfold_v1_injection_proto,
		contextfoldv1.File_contextfold_v1_memory_proto,
		contextfoldv1.File_contextfold_v1_provider_proto,
	}
	for _, file := range files {
		for i := 0; i < file.Services().Len(); i++ {
			service := file.Services().Get(i)
			for j := 0; j < service.Methods().Len(); j++ {
				method := service.Methods().Get(j)
				options, _ := method.Options().(*descriptorpb.MethodOptions)
				if options.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS {
					safe["/"+string(service.FullName())+"/"+string(method.Name())] = true
				}
			}
		}
	}
	return safe
}()

// SafeToRepeat tells whether a method, by its full gRPC name, changes nothing, so that trying
// it again is always safe.
func SafeToRepeat(method string) bool {
	return safeToRepeat[method]
}

// RetrySafeCalls tries a call that changes nothing again when the connection, not the service,
// failed it (UNAVAILABLE, or CANCELLED without the caller cancelling, as some proxies report a
// cut connection): up to three attempts, 50 ms then 100 ms apart, all within the call's own
// deadline. Every other call goes through once. Dial puts it on its connection; add it to a
// connection of your own with grpc.WithChainUnaryInterceptor.
func RetrySafeCalls(ctx context.Context, method string, req, reply interface{}, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !SafeToRepeat(method) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	for attempt := 0; ; attempt++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil || attempt+1 >= attempts || !connectionFailed(err) || ctx.Err() != nil {
			return err
		}
		wait := time.NewTimer(firstBackoff << attempt)
		select {
		case <-ctx.Done():
			wait.Stop()
			return err // the deadline passed, or the caller gave up, while waiting
		case <-wait.C:
		}
	}
}

func connectionFailed(err error) bool {
	code := status.Code(err)
	return code == codes.Unavailable || code == codes.Canceled
}
