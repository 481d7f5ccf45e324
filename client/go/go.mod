module contextfold.dev/go

go 1.19

// The minimum versions for a build in module mode. The tests run in GOPATH mode against
// Debian 12's packages (gRPC-Go 1.33, protobuf-go 1.28), so the code keeps to the API both
// these and current releases have; see the README's "Go" section.
require (
	google.golang.org/grpc v1.64.0
	google.golang.org/protobuf v1.34.1
)
