#!/usr/bin/env bash
# Start one scanserver on each host given, over ssh, without systemd.
# usage: NATS=nats://n1:4222 ./start-hosts.sh host1 host2 host3
# --insecure: scanserver refuses to listen on a network address (0.0.0.0)
# without it; scanplane has no TLS or authentication yet (README
# "Security"), so use this on a private network only.
set -euo pipefail
: "${NATS:?set NATS to the cluster's NATS URL(s)}"
for h in "$@"; do
  ssh "$h" "nohup /usr/local/bin/scanserver --nats '$NATS' --host '$h' --listen 0.0.0.0:8100 --advertise '$h:8100' --insecure \
    >/var/log/scanserver.log 2>&1 </dev/null &"
  echo "started scanserver on $h"
done
