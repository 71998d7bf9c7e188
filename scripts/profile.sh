#!/usr/bin/env bash
# profile.sh OUT [bench|load|all|scan] — CPU and allocation profiles (go
# tool pprof) of a coordinator, one scan server and the client, under the
# one-row benchmark (e2e BenchmarkOneRowScan) and under the load test
# (cmd/loadtest --fault none --policies adaptive); with scan, CPU profiles
# of a warm whole-table scan (see below). all = bench and load.
#
#   OUT/bench/  coordinator.cpu.pb.gz coordinator.alloc.pb.gz   (window of SECS s)
#               scanserver.cpu.pb.gz  scanserver.alloc.pb.gz    (window of SECS s)
#               client.cpu.pprof client.alloc.pprof e2e.test     (go test -cpuprofile/-memprofile: the whole test)
#               bench.txt
#   OUT/load/   the same names; client.* from loadtest --cpuprofile/--memprofile
#               (the whole run); loadtest.txt, report/
#   OUT/*/*.top.txt  go tool pprof -top -nodecount=15 of each, flat and -cum
#
# The coordinator and scan server profiles come from their --http
# endpoint's /debug/pprof/ (profile?seconds=SECS for CPU, allocs?seconds=SECS
# for the allocations made in the same window: alloc_space), taken while the
# workload runs: the benchmark once its coordinator has counted BENCH_FROM
# scans (past the warm-up and past go test's first b.N=1 run), the load test
# once LOAD_FROM. The benchmark's scanservers have --http (e2e starts them
# with HostMetrics); the load test's get it from a wrapper scanserver in
# OUT/wrap given to loadtest --bin.
#
#   OUT/scan/   client.cpu (scanctl bench --cpuprofile: the timed scans),
#               coordinator.cpu.pb.gz (coordinator1), host1..3.cpu.pb.gz and
#               hosts.cpu.top.txt (the three scanserver processes merged),
#               bench.txt, window.txt (rows the servers streamed in the
#               window, load average). A `scanctl up` cluster with its
#               defaults on --port-base SCAN_PORT_BASE (data in OUT/scan/data,
#               removed at the end), a table of SCAN_ROWS rows over
#               SCAN_TABLETS tablets, scanctl bench --parallel SCAN_PARALLEL
#               for SCAN_ROUNDS rounds after a warm-up scan; the servers'
#               window of SECS s starts SCAN_FROM s after the bench.
#
# Environment: SECS (15), BENCH_N (benchmark scans, 25000: long enough to
# outlast BENCH_FROM and the window), BENCH_FROM (3000), LOAD_DURATION
# (loadtest --duration, 25s), LOAD_FROM (1500), LOAD_ARGS (extra loadtest
# flags), SCAN_PORT_BASE (23222), SCAN_ROWS (1000000), SCAN_TABLETS (8),
# SCAN_PARALLEL (4), SCAN_ROUNDS (25), SCAN_FROM (5). Needs go, curl. Profiles are never committed: keep OUT outside
# the repository or in an ignored directory.
set -euo pipefail

usage() { echo "usage: $0 OUT [bench|load|all]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
what=${2:-all}
case $what in bench|load|all|scan) ;; *) usage ;; esac
SECS=${SECS:-15}
BENCH_N=${BENCH_N:-25000}
BENCH_FROM=${BENCH_FROM:-3000}
LOAD_DURATION=${LOAD_DURATION:-25s}
LOAD_FROM=${LOAD_FROM:-1500}
LOAD_ARGS=${LOAD_ARGS:-}
SCAN_PORT_BASE=${SCAN_PORT_BASE:-23222}
SCAN_ROWS=${SCAN_ROWS:-1000000}
SCAN_TABLETS=${SCAN_TABLETS:-8}
SCAN_PARALLEL=${SCAN_PARALLEL:-4}
SCAN_ROUNDS=${SCAN_ROUNDS:-25}
SCAN_FROM=${SCAN_FROM:-5}

root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
log() { echo "profile.sh: $*" >&2; }

pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
}
trap cleanup EXIT

log "building into $out/bin"
mkdir -p "$out/bin" "$out/wrap"
(cd "$root" && go build -o "$out/bin/" ./cmd/coordinator ./cmd/scanserver ./cmd/loadtest ./cmd/scanctl)
ln -sf "$out/bin/coordinator" "$out/wrap/coordinator"
cat >"$out/wrap/scanserver" <<EOF
#!/bin/sh
# scanserver with its /metrics and /debug/pprof/ on an ephemeral port
exec "$out/bin/scanserver" "\$@" --http 127.0.0.1:0
EOF
chmod +x "$out/wrap/scanserver"

# child NAME PARENT: the pid of PARENT's oldest child process named NAME.
child() { pgrep -o -P "$2" -x "$1" || true; }

# busiest NAME PARENT: the pid of PARENT's child named NAME that has used
# the most CPU so far (utime + stime of /proc/PID/stat).
busiest() {
	local p best="" max=-1 t
	for p in $(pgrep -P "$2" -x "$1"); do
		t=$(awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$p/stat" 2>/dev/null || echo -1)
		if [ "$t" -gt "$max" ]; then
			max=$t
			best=$p
		fi
	done
	echo "$best"
}

# httpof PID: the http address in the ready file the process was started
# with (--ready-file FILE; localcluster passes it).
httpof() {
	local f
	f=$(tr '\0' '\n' <"/proc/$1/cmdline" | sed -n '/^--ready-file$/{n;p;}' | tail -1)
	[ -n "$f" ] && [ -r "$f" ] || return 0
	sed -n 's/.*"http": *"\([^"]*\)".*/\1/p' "$f"
}

# scans ADDR: the coordinator's scanplane_coordinator_scans_total (0 if
# not readable yet).
scans() {
	curl -fsS --max-time 5 "http://$1/metrics" 2>/dev/null |
		awk '/^scanplane_coordinator_scans_total/ {s += $2} END {printf "%d\n", s}' || echo 0
}

# window DIR PARENT FROM: waits until a coordinator child of PARENT has
# counted FROM scans, then takes CPU and allocation profiles of it and of
# the busiest scanserver sibling so far over the same SECS seconds;
# DIR/window.txt gets the pids and the coordinator's scan count before and
# after.
window() {
	local dir=$1 parent=$2 from=$3 co addr n ss saddr
	while kill -0 "$parent" 2>/dev/null; do
		co=$(child coordinator "$parent")
		addr=""
		[ -n "$co" ] && addr=$(httpof "$co")
		if [ -n "$addr" ]; then
			n=$(scans "$addr")
			if [ "$n" -ge "$from" ]; then
				ss=$(busiest scanserver "$parent")
				saddr=""
				[ -n "$ss" ] && saddr=$(httpof "$ss")
				if [ -z "$saddr" ]; then
					log "scanserver $ss has no --http address"
					return 1
				fi
				log "$(basename "$dir"): coordinator pid $co ($addr, $n scans) and scanserver pid $ss ($saddr): ${SECS}s profiles"
				local jobs=()
				for p in "coordinator $addr" "scanserver $saddr"; do
					set -- $p
					curl -fsS --max-time $((SECS + 30)) -o "$dir/$1.cpu.pb.gz" "http://$2/debug/pprof/profile?seconds=$SECS" & jobs+=($!)
					curl -fsS --max-time $((SECS + 30)) -o "$dir/$1.alloc.pb.gz" "http://$2/debug/pprof/allocs?seconds=$SECS" & jobs+=($!)
				done
				local rc=0
				for j in "${jobs[@]}"; do wait "$j" || rc=1; done
				local n2
				n2=$(scans "$addr")
				log "$(basename "$dir"): window done ($n2 scans)"
				printf 'coordinator pid %s http %s\nscanserver pid %s http %s\nscans before %s after %s in %ss\nload average %s\n' \
					"$co" "$addr" "$ss" "$saddr" "$n" "$n2" "$SECS" "$(cut -d' ' -f1-3 /proc/loadavg)" >"$dir/window.txt"
				return $rc
			fi
		fi
		sleep 0.5
	done
	log "$(basename "$dir"): the workload ended before its coordinator counted $from scans"
	return 1
}

# tops DIR: go tool pprof -top of every profile in DIR, flat and cumulative.
tops() {
	local f b idx
	for f in "$1"/*.pb.gz "$1"/*.pprof; do
		[ -e "$f" ] || continue
		b=${f%.pb.gz}
		b=${b%.pprof}
		idx=""
		case $f in *alloc*) idx=-sample_index=alloc_space ;; esac
		go tool pprof -top -nodecount=15 $idx "$f" >"$b.top.txt" 2>&1 || true
		go tool pprof -top -cum -nodecount=15 $idx "$f" >"$b.cum.txt" 2>&1 || true
	done
}

# waitchild NAME PARENT: the pid of PARENT's child NAME, once it exists.
waitchild() {
	local p
	while kill -0 "$2" 2>/dev/null; do
		p=$(child "$1" "$2")
		if [ -n "$p" ]; then
			echo "$p"
			return
		fi
		sleep 0.2
	done
}

if [ "$what" = scan ]; then
	d=$out/scan
	rm -rf "$d/data"
	mkdir -p "$d"
	log "scan: scanctl up --port-base $SCAN_PORT_BASE, $SCAN_ROWS rows over $SCAN_TABLETS tablets"
	"$out/bin/scanctl" up --port-base "$SCAN_PORT_BASE" --data "$d/data" --bin "$out/bin" --child-log-level warn >"$d/up.txt" 2>&1 &
	up=$!
	pids+=("$up")
	until grep -q '^cluster ready' "$d/up.txt"; do
		kill -0 "$up" 2>/dev/null || { log "scan: scanctl up failed"; cat "$d/up.txt" >&2; exit 1; }
		sleep 0.5
	done
	export SCANPLANE_NATS
	SCANPLANE_NATS=$(sed -n 's/^ *nats *//p' "$d/up.txt")
	"$out/bin/scanctl" ingest --table t --generate "$SCAN_ROWS" --splits "$SCAN_TABLETS" >&2
	# name http://ADDR/metrics of each process, from up's listing
	mapfile -t procs < <(awk '$1 ~ /^(coordinator1|host[0-9]+)$/ { for (i = 2; i <= NF; i++) if ($i ~ /\/metrics$/) { sub(/\/metrics$/, "", $i); print $1, $i } }' "$d/up.txt")
	streamed() {
		local p sum=0 n
		for p in "${procs[@]}"; do
			set -- $p
			case $1 in host*) ;; *) continue ;; esac
			n=$(curl -fsS --max-time 5 "$2/metrics" | awk '/^scanplane_scanserver_rows_streamed_total/ {s += $2} END {printf "%d\n", s}')
			sum=$((sum + n))
		done
		echo "$sum"
	}
	"$out/bin/scanctl" bench --table t --parallel "$SCAN_PARALLEL" --rounds "$SCAN_ROUNDS" --cpuprofile "$d/client.cpu" >"$d/bench.txt" 2>&1 &
	bench=$!
	pids+=("$bench")
	sleep "$SCAN_FROM"
	r0=$(streamed)
	jobs=()
	for p in "${procs[@]}"; do
		set -- $p
		name=$1
		[ "$name" = coordinator1 ] && name=coordinator
		curl -fsS --max-time $((SECS + 30)) -o "$d/$name.cpu.pb.gz" "$2/debug/pprof/profile?seconds=$SECS" & jobs+=($!)
	done
	for j in "${jobs[@]}"; do wait "$j" || true; done
	r1=$(streamed)
	printf 'rows streamed by the scan servers in the %ss window: %s\nload average %s\n' "$SECS" $((r1 - r0)) "$(cut -d' ' -f1-3 /proc/loadavg)" >"$d/window.txt"
	wait "$bench" || { log "scan: scanctl bench failed"; cat "$d/bench.txt" >&2; exit 1; }
	kill "$up" 2>/dev/null || true
	wait "$up" || true
	rm -rf "$d/data"
	tops "$d"
	for f in "$d"/client.cpu; do
		go tool pprof -top -nodecount=15 "$f" >"$d/client.top.txt" 2>&1 || true
		go tool pprof -top -cum -nodecount=15 "$f" >"$d/client.cum.txt" 2>&1 || true
	done
	go tool pprof -top -cum -nodecount=60 "$d"/host*.cpu.pb.gz >"$d/hosts.cpu.top.txt" 2>&1 || true
	cat "$d/bench.txt" "$d/window.txt" >&2
fi

if [ "$what" != load ] && [ "$what" != scan ]; then
	d=$out/bench
	mkdir -p "$d"
	log "bench: go test ./e2e -bench BenchmarkOneRowScan -benchtime ${BENCH_N}x"
	(cd "$root" && exec go test ./e2e -run '^$' -bench '^BenchmarkOneRowScan$' -benchtime "${BENCH_N}x" -count 1 \
		-o "$d/e2e.test" -cpuprofile "$d/client.cpu.pprof" -memprofile "$d/client.alloc.pprof") >"$d/bench.txt" 2>&1 &
	gt=$!
	pids+=("$gt")
	tb=$(waitchild e2e.test "$gt")
	[ -n "$tb" ] || { log "bench: no e2e.test process"; cat "$d/bench.txt" >&2; exit 1; }
	window "$d" "$tb" "$BENCH_FROM" || true
	wait "$gt" || { log "bench: go test failed"; tail -20 "$d/bench.txt" >&2; exit 1; }
	grep -E '^BenchmarkOneRowScan' "$d/bench.txt" >&2 || true
	tops "$d"
fi

if [ "$what" != bench ] && [ "$what" != scan ]; then
	d=$out/load
	mkdir -p "$d"
	log "load: loadtest --fault none --policies adaptive --duration $LOAD_DURATION $LOAD_ARGS"
	# shellcheck disable=SC2086
	"$out/bin/loadtest" --fault none --policies adaptive --duration "$LOAD_DURATION" --bin "$out/wrap" --out "$d/report" \
		--progress off --cpuprofile "$d/client.cpu.pprof" --memprofile "$d/client.alloc.pprof" $LOAD_ARGS >"$d/loadtest.txt" 2>&1 &
	lt=$!
	pids+=("$lt")
	window "$d" "$lt" "$LOAD_FROM" || true
	wait "$lt" || { log "load: loadtest failed"; tail -20 "$d/loadtest.txt" >&2; exit 1; }
	sed -n '/^$/,$p' "$d/loadtest.txt" | head -8 >&2
	tops "$d"
fi
log "profiles and their -top in $out"
