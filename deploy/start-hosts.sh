#!/usr/bin/env bash
# Start one scanserver on each host given, over ssh, without systemd.
# usage: NATS=nats://n1:4222 ./start-hosts.sh host1 host2 host3
#        NATS=... SECRETS=/etc/scanplane/secrets ./start-hosts.sh host1 ...
# Each scanserver listens on 0.0.0.0:8100 (actors) and 0.0.0.0:8101
# (--http: /metrics, as deploy/prometheus/prometheus.yml scrapes it).
# scanserver refuses to listen on a network address without --secrets or
# --insecure: with SECRETS set it runs with --secrets SECRETS (TLS and
# authentication; the directory must be on every host), else with
# --insecure (plain text: a private network you trust only).
set -euo pipefail
: "${NATS:?set NATS to the NATS URL(s) of the cluster}"
security="--insecure"
if [ -n "${SECRETS:-}" ]; then
  security="--secrets '$SECRETS'"
fi
for h in "$@"; do
  ssh "$h" "nohup /usr/local/bin/scanserver --nats '$NATS' --host '$h' --listen 0.0.0.0:8100 --advertise '$h:8100' --http 0.0.0.0:8101 $security \
    >/var/log/scanserver.log 2>&1 </dev/null &"
  echo "started scanserver on $h"
done
