"""Scan a key range of a scanplane table over the public gRPC API.

Usage: python3 scan.py ADDR TABLE START END
  ADDR   a coordinator's HTTP address (host:port), e.g. 127.0.0.1:8091
  START  first key (inclusive), END key after the range (exclusive);
         an empty string is the table's start or end.
Prints one row per line: key TAB value. Generate the stubs first, from
the repository's root:
  python3 -m grpc_tools.protoc -Iapi --python_out=OUT --grpc_python_out=OUT api/scanplane/v1/scan.proto
and run with OUT on PYTHONPATH.
"""
import sys

import grpc
from scanplane.v1 import scan_pb2, scan_pb2_grpc

addr, table, start, end = sys.argv[1:5]
with grpc.insecure_channel(addr) as channel:
    stub = scan_pb2_grpc.ScanServiceStub(channel)
    request = scan_pb2.ScanRequest(table=table, start=start.encode(), end=end.encode())
    try:
        for response in stub.Scan(request):
            for row in response.rows:
                sys.stdout.buffer.write(row.key + b"\t" + row.value + b"\n")
    except grpc.RpcError as e:
        sys.exit(f"scan failed: {e.code().name}: {e.details()}")
