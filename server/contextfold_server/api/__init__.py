"""The gRPC face of the service: servicers that translate proto to domain and back."""
