#!/usr/bin/env bash
# bench/limits.sh: the cost of rate limits and metering. Throughput of
# GET /api/v1/markets/global with limits and metering on (in-process
# limiter, then the Redis limiter) against the same server with them off,
# plus a check that metering wrote every call, and the limiter's Go
# micro-benchmark. A fourth configuration, "headers", is limits off in a
# build with -tags benchheaders: the five rate-limit headers with fixed
# values and nothing limited or metered, which tells net/http's part of
# the cost from the limiter's and the meter's.
#
#   bash bench/limits.sh                  # from the repo root
#   DURATION=30s ROUNDS=3 bash bench/limits.sh
#
# Environment: DURATION (15s), CONNS (64), THREADS (2), ROUNDS (2: off,
# headers, memory, redis, off, headers, memory, redis), READY_TIMEOUT and
# SAVE_TIMEOUT seconds (120, 120), METER_WAIT seconds (30), LOG_LEVEL
# (info), BENCH_COUNT (3),
# REDIS_URL (redis://127.0.0.1:6379/0), REDIS_STOP=1 to shut down a Redis
# this script started, STRICT=1 to exit 1 when a goal is missed (by default
# only a broken run exits non-zero: a failed check, a non-2xx answer, or
# metering that lost calls).
# See bench/README.md for what is measured and the goals.
set -euo pipefail

DURATION=${DURATION:-15s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
READY_TIMEOUT=${READY_TIMEOUT:-120}
SAVE_TIMEOUT=${SAVE_TIMEOUT:-120}
METER_WAIT=${METER_WAIT:-30}
LOG_LEVEL=${LOG_LEVEL:-info}
BENCH_COUNT=${BENCH_COUNT:-3}
DEFAULT_REDIS_URL=redis://127.0.0.1:6379/0
REDIS_URL=${REDIS_URL:-$DEFAULT_REDIS_URL}
REDIS_STOP=${REDIS_STOP:-0}
STRICT=${STRICT:-0}

# The goals (issue text): throughput with limits on against limits off.
GOAL_MEMORY=0.9
GOAL_REDIS=0.6
CONFIGS=(off headers memory redis)

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '[limits.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

# ---------------------------------------------------------------- cleanup
TMP=$(mktemp -d -t coinpulse-limits.XXXXXX)
SERVER_PID=""
REDIS_STARTED=0
# Every key of this run's Redis limiter starts with this; the trap deletes them.
PREFIX="cp:bench:$$-$(date +%s):"
rcli() { redis-cli -u "$REDIS_URL" "$@"; }
cleanup() {
	local rc=$?
	set +e
	if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
		kill -TERM "$SERVER_PID" 2>/dev/null
		for _ in $(seq 200); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$SERVER_PID" 2>/dev/null
		wait "$SERVER_PID" 2>/dev/null
	fi
	if command -v redis-cli >/dev/null 2>&1 && rcli ping >/dev/null 2>&1; then
		rcli --scan --pattern "$PREFIX*" 2>/dev/null | xargs -r redis-cli -u "$REDIS_URL" del >/dev/null 2>&1
		if ((REDIS_STARTED)) && [[ $REDIS_STOP == 1 ]]; then
			log "shutting down the Redis this script started"
			rcli shutdown nosave >/dev/null 2>&1
		elif ((REDIS_STARTED)); then
			log "leaving the Redis this script started running (REDIS_STOP=1 stops it)"
		fi
	fi
	if [[ $rc -ne 0 && -d $TMP ]]; then
		for f in "$TMP"/*.err; do
			[[ -s $f ]] || continue
			log "last lines of $(basename "$f"):"
			tail -n 20 "$f" >&2
		done
	fi
	rm -rf "$TMP"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- 1. tools
need=()
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v jq >/dev/null 2>&1 || need+=(jq)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
if ! command -v redis-server >/dev/null 2>&1 && [[ $REDIS_URL == "$DEFAULT_REDIS_URL" ]]; then need+=(redis-server); fi
if ((${#need[@]})); then
	log "installing ${need[*]} from Debian"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq "${need[@]}" >&2
fi
command -v go >/dev/null 2>&1 || die "go is not on PATH"

REV=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git status --porcelain -- . ':!bench' 2>/dev/null) ]]; then REV="$REV+local changes"; fi
log "building coinpulse ($REV)"
go build -o "$TMP/coinpulse" ./cmd/coinpulse
go build -tags benchheaders -o "$TMP/coinpulse-headers" ./cmd/coinpulse
BIN=$TMP/coinpulse
NCPU=$(nproc)

# ---------------------------------------------------------------- 2. Redis
if ! rcli ping >/dev/null 2>&1; then
	[[ $REDIS_URL == "$DEFAULT_REDIS_URL" ]] || die "no Redis answers at $REDIS_URL"
	log "starting redis-server on 127.0.0.1:6379 (no persistence)"
	mkdir -p /var/lib/redis /var/log/redis
	redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
		--dir /var/lib/redis --logfile /var/log/redis/ci.log >&2
	REDIS_STARTED=1
	for _ in $(seq 100); do rcli ping >/dev/null 2>&1 && break; sleep 0.05; done
	rcli ping >/dev/null 2>&1 || die "redis-server did not answer after start"
fi
REDIS_VERSION=$(rcli info server | tr -d '\r' | awk -F: '$1 == "redis_version" { print $2 }')
# The local redis-server's pid, for its CPU time during the Redis passes.
REDIS_PID=$(rcli info server | tr -d '\r' | awk -F: '$1 == "process_id" { print $2 }')
if [[ -z $REDIS_PID || $(cat "/proc/$REDIS_PID/comm" 2>/dev/null) != redis-server* ]]; then REDIS_PID=""; fi
log "Redis $REDIS_VERSION at $REDIS_URL (pid ${REDIS_PID:-not local}); limiter keys under $PREFIX"

# ---------------------------------------------------------------- 3. micro-benchmark
# BenchmarkMemoryAllow: one in-process check of an account's three windows
# (the goal); BenchmarkRedisAllow: one sequential round trip to Redis (no
# goal, it tells what a check costs the Redis configuration).
log "go test -bench of the limiter (count $BENCH_COUNT)"
COINPULSE_TEST_REDIS=$REDIS_URL go test -run '^$' -bench '^Benchmark(MemoryAllow|RedisAllow)$' -benchmem \
	-count "$BENCH_COUNT" ./internal/ratelimit/ >"$TMP/gobench.txt" 2>&1 ||
	{ cat "$TMP/gobench.txt" >&2; die "go test -bench failed"; }
sed 's/^/    /' "$TMP/gobench.txt" >&2
# gobench NAME FIELD: the best (lowest ns/op) run's "ns/op" or "allocs/op".
gobench() {
	awk -v n="$1" -v f="$2" '$1 ~ "^" n "(-[0-9]+)?$" {
		for (i = 3; i < NF; i++) v[$(i + 1)] = $i
		if (best == "" || v["ns/op"] + 0 < best + 0) { best = v["ns/op"]; out = v[f] }
	} END { print (out == "" ? "n/a" : out) }' "$TMP/gobench.txt"
}
MEM_NS=$(gobench BenchmarkMemoryAllow ns/op)
MEM_ALLOCS=$(gobench BenchmarkMemoryAllow allocs/op)
RDS_NS=$(gobench BenchmarkRedisAllow ns/op)
RDS_ALLOCS=$(gobench BenchmarkRedisAllow allocs/op)
[[ $MEM_NS != n/a ]] || die "no BenchmarkMemoryAllow figure in the go test output"

# ---------------------------------------------------------------- helpers
port_in_use() {
	if command -v ss >/dev/null 2>&1; then
		ss -Htln "sport = :$1" 2>/dev/null | grep -q .
	else
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
	fi
}
free_port() {
	local p
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 40000))
		port_in_use "$p" || { echo "$p"; return 0; }
	done
	die "no free port found"
}
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# start_server NAME [extra flags...]: launches serve ($SERVE_BIN, else
# $BIN) on the data dir in the background and sets SERVER_PID.
start_server() {
	local name=$1
	shift
	"${SERVE_BIN:-$BIN}" serve --addr "127.0.0.1:$PORT" --data-dir "$DATA" --demo=false --refresh 60s \
		--log-level "$LOG_LEVEL" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
	SERVER_PID=$!
}

# wait_ready: polls /readyz every 50 ms until 200.
wait_ready() {
	local code deadline
	deadline=$(($(date +%s) + READY_TIMEOUT))
	while :; do
		code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$BASE/readyz" || true)
		[[ $code == 200 ]] && return 0
		kill -0 "$SERVER_PID" 2>/dev/null || die "serve (pid $SERVER_PID) exited before it was ready"
		(($(date +%s) < deadline)) || die "serve not ready after ${READY_TIMEOUT}s (last /readyz: $code)"
		sleep 0.05
	done
}

# stop_server: SIGTERM and wait; a non-zero exit is a failure.
stop_server() {
	local rc=0
	kill -TERM "$SERVER_PID"
	wait "$SERVER_PID" || rc=$?
	SERVER_PID=""
	((rc == 0)) || die "serve exited with status $rc after SIGTERM"
}

# cpu_ticks PID...: user+system clock ticks of the processes.
cpu_ticks() {
	local t=0 p
	for p in "$@"; do
		[[ -r /proc/$p/stat ]] || continue
		t=$((t + $(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat")))
	done
	echo "$t"
}
CLK_TCK=$(getconf CLK_TCK)
# busy_ticks: the machine's non-idle clock ticks (all CPUs).
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
# child_ticks FILE: CPU ticks of this shell's reaped children (wrk) from a
# `times` output saved in FILE; `times` must run in the main shell.
child_ticks() {
	awk -v hz="$CLK_TCK" 'NR == 2 {
		t = 0
		for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] }
		printf "%d", t * hz
	}' "$1"
}

# wrk output parsing ------------------------------------------------------
wrk_rps() { awk '/^Requests\/sec:/ { print $2 }' "$1"; }
wrk_non2xx() { awk -F: '/Non-2xx or 3xx responses/ { gsub(/ /, "", $2); print $2 }' "$1"; }
wrk_sockerr() { sed -n 's/^ *Socket errors: *//p' "$1"; }
wrk_reqs() { awk '/requests in/ { print $1; exit }' "$1"; }
wrk_secs() { awk '/requests in/ { sub(/s,?$/, "", $4); print $4; exit }' "$1"; }
# to_ms VALUE: converts wrk's 850.00us / 1.23ms / 1.01s / 1.00m to ms.
to_ms() {
	awk -v v="$1" 'BEGIN {
		n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
		if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000; else if (u == "h") n *= 3600000
		printf "%.2f", n
	}'
}
wrk_p99() {
	local v
	v=$(awk '/Latency Distribution/ { d = 1 } d && $1 == "99%" { print $2; exit }' "$1")
	[[ -n $v ]] || die "no 99% line in $1"
	to_ms "$v"
}

# run_wrk NAME: runs wrk against the endpoint with the key, keeps its output
# in $TMP/wrk-NAME.txt, and the CPU ticks of serve (cpu-NAME), of
# redis-server (rcpu-NAME), of wrk (wcpu-NAME) and of the rest of the
# machine (other-NAME, in cores) during the pass.
run_wrk() {
	local name=$1 c0 c1 r0 r1 b0 b1 w0 w1
	log "wrk $name: -t$THREADS -c$CONNS -d$DURATION $URL (load average $(loadavg))"
	times >"$TMP/times0.txt"
	c0=$(cpu_ticks "$SERVER_PID") r0=$(cpu_ticks ${REDIS_PID:+"$REDIS_PID"}) b0=$(busy_ticks)
	wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -H "Authorization: Bearer $KEY" "$URL" \
		>"$TMP/wrk-$name.txt" 2>&1 || { cat "$TMP/wrk-$name.txt" >&2; die "wrk $name failed"; }
	c1=$(cpu_ticks "$SERVER_PID") r1=$(cpu_ticks ${REDIS_PID:+"$REDIS_PID"}) b1=$(busy_ticks)
	times >"$TMP/times1.txt"
	w0=$(child_ticks "$TMP/times0.txt") w1=$(child_ticks "$TMP/times1.txt")
	echo $((c1 - c0)) >"$TMP/cpu-$name.txt"
	echo $((r1 - r0)) >"$TMP/rcpu-$name.txt"
	echo $((w1 - w0)) >"$TMP/wcpu-$name.txt"
	awk -v o=$((b1 - b0 - (c1 - c0) - (r1 - r0) - (w1 - w0))) -v hz="$CLK_TCK" -v d="$(wrk_secs "$TMP/wrk-$name.txt")" \
		'BEGIN { x = o / hz / d; printf "%.2f", (x < 0 ? 0 : x) }' >"$TMP/other-$name.txt"
	sed 's/^/    /' "$TMP/wrk-$name.txt" >&2
	[[ -n $(wrk_rps "$TMP/wrk-$name.txt") ]] || die "no Requests/sec in wrk $name output"
}

# month_calls: the account's metered calls this month, from GET /usage
# (free of charge: it is not counted itself).
month_calls() {
	local n
	n=$(curl -s --max-time 5 -H "Authorization: Bearer $KEY" "$BASE/api/v1/usage" | jq -r '.data.month_calls // empty' 2>/dev/null || true)
	[[ $n =~ ^[0-9]+$ ]] || die "GET /api/v1/usage gave no month_calls"
	echo "$n"
}

# wait_metered WANT: waits (2 s, then polling every second) until
# month_calls is at least WANT and has stopped moving, or METER_WAIT
# seconds have passed; sets METERED (the count) and WAITED (seconds).
wait_metered() {
	local want=$1 start prev=-1
	start=$(date +%s)
	sleep 2
	while :; do
		METERED=$(month_calls)
		WAITED=$(($(date +%s) - start))
		if ((METERED >= want && METERED == prev)) || ((WAITED >= METER_WAIT)); then break; fi
		prev=$METERED
		sleep 1
	done
}

# check_headers NAME: one GET with curl -i; the limits' headers must be
# there exactly when limits are on. The call is counted when they are.
check_headers() {
	local name=$1 code has
	code=$(curl -s -D "$TMP/headers-$name.txt" -o "$TMP/body-$name.json" -w '%{http_code}' \
		-H "Authorization: Bearer $KEY" "$URL")
	[[ $code == 200 ]] || { cat "$TMP/body-$name.json" >&2; die "$name: GET $PATH_Q answered $code"; }
	has=no
	grep -qi '^x-ratelimit-limit:' "$TMP/headers-$name.txt" && has=yes
	case $name in
	off-*) [[ $has == no ]] || die "$name: limits are off but the answer carries X-RateLimit-Limit" ;;
	*) [[ $has == yes ]] || die "$name: limits are on but the answer carries no X-RateLimit-Limit" ;;
	esac
	tr -d '\r' <"$TMP/headers-$name.txt" | grep -i '^x-ratelimit-limit:' >"$TMP/limit-header-$name.txt" || true
}

# ---------------------------------------------------------------- 4. data dir, plan, key
PORT=$(free_port)
BASE=http://127.0.0.1:$PORT
PATH_Q=/api/v1/markets/global
URL=$BASE$PATH_Q
DATA=$TMP/data
LOAD_START=$(loadavg)

log "preparing the data dir (default 1,000-coin universe)"
start_server prepare --limits off
wait_ready
deadline=$(($(date +%s) + SAVE_TIMEOUT))
while ! grep -q 'market data ready' "$TMP/prepare.err"; do
	kill -0 "$SERVER_PID" 2>/dev/null || die "serve exited while preparing the data dir"
	(($(date +%s) < deadline)) || die "no 'market data ready' log line after ${SAVE_TIMEOUT}s"
	sleep 0.1
done
stop_server

# The plan must not throttle the load: the bench tier's windows are huge
# (the loader wants per_second and per_minute above 0) and its month
# unlimited. The limiter still checks all three windows on every call.
TIER=enterprise
PLANS=$TMP/plans.json
jq --arg t "$TIER" '(.plans[] | select(.tier == $t)) |= (.per_second = 100000000 | .per_minute = 100000000 | .monthly_calls = "unlimited")' \
	plans/default.json >"$PLANS"
[[ $(jq -r --arg t "$TIER" '.plans[] | select(.tier == $t) | "\(.per_second) \(.per_minute) \(.monthly_calls)"' "$PLANS") == "100000000 100000000 unlimited" ]] ||
	die "could not write the bench plan file"

EMAIL=bench-limits-$$@example.com
"$BIN" users create --data-dir "$DATA" --email "$EMAIL" --tier "$TIER" >&2
KEY=$("$BIN" keys create --data-dir "$DATA" --email "$EMAIL")
[[ $KEY == sk_live_* ]] || die "keys create printed no live key: $KEY"
log "user $EMAIL (tier $TIER) with a live key; plan file $PLANS"

# flags_of CONFIG: sets FLAGS to serve's flags for a configuration, and
# SERVE_BIN to its binary.
flags_of() {
	SERVE_BIN=$BIN
	case $1 in
	off) FLAGS=(--limits off) ;;
	headers) FLAGS=(--limits off) SERVE_BIN=$TMP/coinpulse-headers ;;
	memory) FLAGS=(--limits on --plans "$PLANS") ;;
	redis) FLAGS=(--limits on --plans "$PLANS" --redis "$REDIS_URL" --redis-prefix "$PREFIX") ;;
	esac
}
# log_says CONFIG: the start-up log line that tells the configuration apart.
log_says() {
	case $1 in
	off) echo 'rate limits and metering are OFF' ;;
	headers) echo 'bench build (-tags benchheaders)' ;;
	memory) echo 'rate limits in process' ;;
	redis) echo 'rate limits in Redis' ;;
	esac
}

# ---------------------------------------------------------------- 5. load
for round in $(seq "$ROUNDS"); do
	for cfg in "${CONFIGS[@]}"; do
		name=$cfg-$round
		flags_of "$cfg"
		start_server "$name" "${FLAGS[@]}"
		wait_ready
		grep -q "$(log_says "$cfg")" "$TMP/$name.err" || die "$name: serve did not log '$(log_says "$cfg")'"
		if [[ $cfg == off || $cfg == headers ]]; then
			check_headers "$name"
			run_wrk "$name"
		else
			before=$(month_calls)
			check_headers "$name"
			run_wrk "$name"
			reqs=$(wrk_reqs "$TMP/wrk-$name.txt")
			non2xx=$(wrk_non2xx "$TMP/wrk-$name.txt")
			# The header check's call is counted too.
			want=$((reqs - ${non2xx:-0} + 1))
			wait_metered $((before + want))
			echo "$((METERED - before - 1)) $WAITED" >"$TMP/metered-$name.txt"
			log "$name: metered $((METERED - before - 1)) calls for wrk's $reqs requests (non-2xx ${non2xx:-0}) after ${WAITED}s"
			if grep -q 'dropping calls' "$TMP/$name.err"; then log "$name: the meter dropped calls"; fi
			if [[ $cfg == redis ]]; then
				nkeys=$(rcli --scan --pattern "$PREFIX*" | wc -l)
				((nkeys > 0)) || die "$name: no limiter keys under $PREFIX in Redis"
			fi
		fi
		stop_server
		SERVE_BIN=""
	done
done
# The headers configuration must send what limits on send: the same keys.
header_keys() { tr -d '\r' <"$TMP/headers-$1.txt" | awk -F: 'NR > 1 && NF > 1 && tolower($1) != "date" { print tolower($1) }' | sort; }
[[ $(header_keys headers-1) == "$(header_keys memory-1)" ]] ||
	die "the headers configuration's header keys ($(header_keys headers-1 | tr '\n' ' ')) are not limits on's ($(header_keys memory-1 | tr '\n' ' '))"
cp "$TMP/body-off-1.json" "$TMP/body.json"
BODY_BYTES=$(stat -c %s "$TMP/body.json")

# ---------------------------------------------------------------- 6. summary
best() { # best CONFIG: the CONFIG-N run with the most requests/s
	local r b="" bv=-1 v
	for r in $(seq "$ROUNDS"); do
		v=$(wrk_rps "$TMP/wrk-$1-$r.txt")
		if awk -v v="$v" -v b="$bv" 'BEGIN { exit !(v + 0 > b + 0) }'; then b=$1-$r bv=$v; fi
	done
	echo "$b"
}
verdict() { # verdict VALUE OP LIMIT
	awk -v v="$1" -v l="$3" -v op="$2" 'BEGIN {
		ok = (op == "<") ? (v + 0 < l + 0) : (v + 0 >= l + 0)
		print ok ? "met" : "MISSED"
	}'
}
# ratio A B: A/B to 3 decimals, for reading; verdicts take exact_ratio,
# so that 0.8959 is not a 0.90 that meets a goal of 0.9.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
exact_ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.9f", a / b }'; }
# per_k TICKS RUN: CPU ms per 1,000 requests of run RUN.
per_k() {
	awk -v t="$1" -v hz="$CLK_TCK" -v n="$(wrk_reqs "$TMP/wrk-$2.txt")" 'BEGIN { printf "%.1f", t / hz * 1000 / n * 1000 }'
}
# cores TICKS RUN: cores busy during run RUN.
cores() {
	awk -v t="$1" -v hz="$CLK_TCK" -v d="$(wrk_secs "$TMP/wrk-$2.txt")" 'BEGIN { printf "%.2f", t / hz / d }'
}

declare -A BEST RPS P99
for cfg in "${CONFIGS[@]}"; do
	BEST[$cfg]=$(best "$cfg")
	RPS[$cfg]=$(wrk_rps "$TMP/wrk-${BEST[$cfg]}.txt")
	P99[$cfg]=$(wrk_p99 "$TMP/wrk-${BEST[$cfg]}.txt")
done
R_HDR=$(ratio "${RPS[headers]}" "${RPS[off]}")
R_MEM=$(ratio "${RPS[memory]}" "${RPS[off]}")
R_RDS=$(ratio "${RPS[redis]}" "${RPS[off]}")
G_MEM=$(verdict "$(exact_ratio "${RPS[memory]}" "${RPS[off]}")" '>=' "$GOAL_MEMORY")
G_RDS=$(verdict "$(exact_ratio "${RPS[redis]}" "${RPS[off]}")" '>=' "$GOAL_REDIS")
G_NS=$(awk -v n="$MEM_NS" -v a="$MEM_ALLOCS" 'BEGIN { print (n + 0 < 1000 && a + 0 == 0) ? "met" : "MISSED" }')

# line LABEL VALUE...: one row of the throughput table.
line() { printf '%-40s %16s %16s %16s %16s\n' "$@"; }
{
	echo
	echo "== Coinpulse limits benchmark  $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit: $REV"
	echo "machine: $NCPU CPUs, $(uname -sr); $(go version | cut -d' ' -f3); $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2); Redis $REDIS_VERSION"
	echo "load average (1/5/15 min) at start: $LOAD_START; at end: $(loadavg)"
	echo "wrk: -t$THREADS -c$CONNS -d$DURATION --latency (keep-alive), Authorization: Bearer <live key>; best of $ROUNDS alternating rounds"
	echo "body: GET $PATH_Q, $BODY_BYTES bytes; default universe (1,000 coins); SQLite; serve --log-level $LOG_LEVEL"
	echo "plan: tier $TIER with per_second and per_minute 100000000, monthly unlimited ($(head -1 "$TMP/limit-header-memory-1.txt"))"
	echo
	line "throughput (-c$CONNS)" "limits off" "headers only" "in-process" "Redis"
	line "  requests/s (best of $ROUNDS)" "${RPS[off]}" "${RPS[headers]}" "${RPS[memory]}" "${RPS[redis]}"
	line "  ratio to limits off" "1.000" "$R_HDR" "$R_MEM" "$R_RDS"
	line "  ratio to headers only" "" "1.000" "$(ratio "${RPS[memory]}" "${RPS[headers]}")" "$(ratio "${RPS[redis]}" "${RPS[headers]}")"
	for r in $(seq "$ROUNDS"); do
		row=()
		for cfg in "${CONFIGS[@]}"; do row+=("$(wrk_rps "$TMP/wrk-$cfg-$r.txt") ($(cat "$TMP/other-$cfg-$r.txt"))"); done
		line "  requests/s run $r (other load, cores)" "${row[@]}"
	done
	for r in $(seq "$ROUNDS"); do
		line "  ratio to off, round $r" "1.000" \
			"$(ratio "$(wrk_rps "$TMP/wrk-headers-$r.txt")" "$(wrk_rps "$TMP/wrk-off-$r.txt")")" \
			"$(ratio "$(wrk_rps "$TMP/wrk-memory-$r.txt")" "$(wrk_rps "$TMP/wrk-off-$r.txt")")" \
			"$(ratio "$(wrk_rps "$TMP/wrk-redis-$r.txt")" "$(wrk_rps "$TMP/wrk-off-$r.txt")")"
	done
	for r in $(seq "$ROUNDS"); do
		line "  ratio to headers only, round $r" "" "1.000" \
			"$(ratio "$(wrk_rps "$TMP/wrk-memory-$r.txt")" "$(wrk_rps "$TMP/wrk-headers-$r.txt")")" \
			"$(ratio "$(wrk_rps "$TMP/wrk-redis-$r.txt")" "$(wrk_rps "$TMP/wrk-headers-$r.txt")")"
	done
	line "  p99 latency ms (best run)" "${P99[off]}" "${P99[headers]}" "${P99[memory]}" "${P99[redis]}"
	row=()
	for cfg in "${CONFIGS[@]}"; do
		b=${BEST[$cfg]}
		row+=("$(cores "$(cat "$TMP/cpu-$b.txt")" "$b") / $(per_k "$(cat "$TMP/cpu-$b.txt")" "$b")")
	done
	line "  serve: cores busy / CPU ms per 1k req" "${row[@]}"
	row=()
	for cfg in "${CONFIGS[@]}"; do
		b=${BEST[$cfg]}
		row+=("$(cores "$(cat "$TMP/wcpu-$b.txt")" "$b") / $(per_k "$(cat "$TMP/wcpu-$b.txt")" "$b")")
	done
	line "  wrk: cores busy / CPU ms per 1k req" "${row[@]}"
	b=${BEST[redis]}
	if [[ -n $REDIS_PID ]]; then
		line "  redis-server: cores / CPU ms per 1k" "-" "-" "-" \
			"$(cores "$(cat "$TMP/rcpu-$b.txt")" "$b") / $(per_k "$(cat "$TMP/rcpu-$b.txt")" "$b")"
	fi
	echo "(headers only: limits off, built with -tags benchheaders: the five rate-limit headers with fixed values, nothing limited or metered)"
	echo "(other load: CPU used by processes other than serve, redis-server and wrk during the pass; above ~0.3 the pass was disturbed)"
	echo
	echo "metering (GET /usage month_calls after the pass, less before, less the header check's call)"
	printf '  %-12s %12s %12s %8s %9s %10s\n' pass metered "wrk reqs" non-2xx "diff" "settled"
	LOST=0
	for r in $(seq "$ROUNDS"); do
		for cfg in memory redis; do
			name=$cfg-$r
			read -r m waited <"$TMP/metered-$name.txt"
			n=$(wrk_reqs "$TMP/wrk-$name.txt")
			x=$(wrk_non2xx "$TMP/wrk-$name.txt")
			d=$((m - (n - ${x:-0})))
			printf '  %-12s %12s %12s %8s %+9d %9ss\n' "$name" "$m" "$n" "${x:-0}" "$d" "$waited"
			((d >= 0)) || LOST=$((LOST - d))
		done
	done
	echo "  (diff > 0, up to $CONNS: calls in flight when wrk stopped, answered and metered but not counted by wrk)"
	if grep -ql 'dropping calls' "$TMP"/memory-*.err "$TMP"/redis-*.err 2>/dev/null; then
		echo "  the meter logged 'dropping calls'"
	fi
	echo
	echo "limiter micro-benchmark (go test -bench, best of $BENCH_COUNT)"
	printf '  %-44s %12s %10s\n' "" ns/op allocs/op
	printf '  %-44s %12s %10s\n' "BenchmarkMemoryAllow (in-process check)" "$MEM_NS" "$MEM_ALLOCS"
	printf '  %-44s %12s %10s\n' "BenchmarkRedisAllow (one round trip)" "$RDS_NS" "$RDS_ALLOCS"
	echo
	echo "goals"
	printf '  %-50s %-7s %s\n' "in-process/off throughput >= $GOAL_MEMORY" "$G_MEM" "$R_MEM"
	printf '  %-50s %-7s %s\n' "Redis/off throughput >= $GOAL_REDIS" "$G_RDS" "$R_RDS"
	printf '  %-50s %-7s %s\n' "BenchmarkMemoryAllow < 1 µs, 0 allocs" "$G_NS" "$MEM_NS ns/op, $MEM_ALLOCS allocs/op"
	if ((LOST > 0)); then
		printf '  %-50s %-7s %s\n' "metering writes every call" "LOST" "$LOST calls lost"
	else
		printf '  %-50s %-7s %s\n' "metering writes every call" "met" "none lost"
	fi

	echo
	FAILED=0
	for f in "$TMP"/wrk-*.txt; do
		run=$(basename "$f" .txt)
		run=${run#wrk-}
		n=$(wrk_non2xx "$f")
		e=$(wrk_sockerr "$f")
		if [[ -n $n ]]; then echo "wrk $run: Non-2xx or 3xx responses: $n"; FAILED=1; fi
		if [[ -n $e ]]; then echo "wrk $run: Socket errors: $e"; fi
	done
	if ((FAILED == 0)); then echo "non-2xx: none"; fi
} | tee "$TMP/summary.txt"

if grep -q "Non-2xx" "$TMP/summary.txt"; then
	die "coinpulse answered non-2xx during the load"
fi
if grep -q "LOST" "$TMP/summary.txt"; then
	die "metering lost calls"
fi
if [[ $STRICT == 1 ]] && grep -q MISSED "$TMP/summary.txt"; then
	die "a goal was missed (STRICT=1)"
fi
log "done"
