#!/bin/sh
# Scan a key range of a scanplane table with curl over Connect's JSON
# protocol. Usage: curl-scan.sh ADDR TABLE START END (START and END as
# text; empty = the table's start or end). Prints each response message
# as one JSON line: {"rows":[{"key":BASE64,"value":BASE64},...]}, and
# last the end of the stream: {} or {"error":{"code":...,"message":...}}.
# Needs curl, base64 and perl.
set -eu
addr=$1 table=$2
start=$(printf %s "$3" | base64 -w0)
end=$(printf %s "$4" | base64 -w0)
body="{\"table\":\"$table\",\"start\":\"$start\",\"end\":\"$end\"}"
# A streaming call's messages are enveloped: a flags byte and a 4-byte
# big-endian length before each JSON message.
perl -e 'print pack("CN", 0, length $ARGV[0]), $ARGV[0]' "$body" |
	curl -sS --fail-with-body -H 'Content-Type: application/connect+json' --data-binary @- \
		"http://$addr/scanplane.v1.ScanService/Scan" |
	perl -0777 -ne 'while (length) { my ($f, $n) = unpack "CN"; print substr($_, 5, $n), "\n"; $_ = substr $_, 5 + $n }'
