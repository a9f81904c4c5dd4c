"""Generated protobuf and gRPC code of the engine API (make proto-python);
do not edit."""
