#!/usr/bin/env bash
# Makes docs/status-page.png, the coordinator's HTML status page as an
# operator sees it: `scanctl up` (one coordinator, three hosts, on the
# well-known ports 8090/8091 of 127.0.0.1, so nothing else may use them),
# a table ingested and scanned, then one host killed so that its servers
# show as dead; headless Chromium (Debian package `chromium` or
# `chromium-headless-shell`) takes the screenshot, 1280 px wide (the page
# fits that width). Usage: scripts/status-page-screenshot.sh [OUT.png]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/status-page.png}
browser=$(command -v chromium || command -v chromium-headless-shell) ||
  { echo "needs chromium (apt-get install chromium-headless-shell)" >&2; exit 1; }
work=$(mktemp -d)
go build -o "$work/bin/" ./cmd/coordinator ./cmd/scanserver ./cmd/scanctl
"$work/bin/scanctl" up --data "$work/data" --coordinators 1 --hosts 3 --no-restart >"$work/up.log" 2>&1 &
up=$!
cleanup() {
  kill -INT "$up" 2>/dev/null || true
  wait "$up" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 1 120); do
  grep -q "press Ctrl-C" "$work/up.log" && break
  kill -0 "$up" 2>/dev/null || { cat "$work/up.log" >&2; exit 1; }
  sleep 0.5
done
grep -q "press Ctrl-C" "$work/up.log" || { echo "cluster not ready in 60s" >&2; cat "$work/up.log" >&2; exit 1; }
"$work/bin/scanctl" ingest --table demo --generate 20000 >/dev/null
for i in $(seq 100 137); do
  "$work/bin/scanctl" scan --table demo --start "row0000${i}00" --end "row0000${i}50" --count >/dev/null
done
# host3 dies: its servers turn dead on the page (missed heartbeats)
pid=$(awk '$1 == "host3" { for (i = 1; i < NF; i++) if ($i == "pid") print $(i + 1) }' "$work/up.log")
kill -9 "$pid"
sleep 4
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,1000 \
  --screenshot="$PWD/$out" http://127.0.0.1:8091/ 2>/dev/null
echo "wrote $out"
