#!/bin/sh
# Regenerates src/rock_e2b/envd/ from E2B's envd .proto files (copied unchanged into proto/ from
# E2B's repository, spec/envd/, commit b8029973aa7da5f741f7bb1a9f833b38a0885438), with the same
# generators E2B's Python SDK uses (its spec/envd/buf-python.gen.yaml): protoc-gen-py (protobuf-py
# messages) and protoc-gen-connectrpc (the Connect services, here their ASGI applications).
#
#   python -m venv /tmp/gen && /tmp/gen/bin/pip install grpcio-tools==1.85.1 \
#       protoc-gen-py==0.6.0 protoc-gen-connectrpc==0.12.1
#   PATH=/tmp/gen/bin:$PATH sh packages/rock-e2b/proto/generate.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out="$here/../src/rock_e2b/envd"
cd "$here"
python -m grpc_tools.protoc -I . \
    --plugin=protoc-gen-py="$(command -v protoc-gen-py)" \
    --plugin=protoc-gen-connectrpc="$(command -v protoc-gen-connectrpc)" \
    --py_out="$out" --connectrpc_out="$out" \
    process/process.proto filesystem/filesystem.proto
