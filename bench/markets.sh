#!/usr/bin/env bash
# bench/markets.sh: start-up time, memory and GET /api/v1/markets throughput
# of Coinpulse against nginx serving the same body as a static file.
#
#   bash bench/markets.sh                 # from the repo root
#   DURATION=30s CONNS=128 bash bench/markets.sh
#
# Environment: DURATION (15s), CONNS (64), THREADS (2), LOW_CONNS (8),
# ROUNDS (2: nginx, coinpulse, nginx, coinpulse), COINS (10000),
# READY_TIMEOUT and SAVE_TIMEOUT seconds (300, 180), LOG_LEVEL (info),
# LIMITS (on: rate limits and metering on, as served, with the bench
# account's tier pro lifted to 100,000,000 calls a second and a minute
# and an unlimited month so that wrk is never refused; off: --limits off),
# STRICT=1 to exit 1 when a goal is missed (by default only a broken run
# exits non-zero).
# See bench/README.md for what is measured and the goals.
set -euo pipefail

DURATION=${DURATION:-15s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
LOW_CONNS=${LOW_CONNS:-8}
ROUNDS=${ROUNDS:-2}
COINS=${COINS:-10000}
READY_TIMEOUT=${READY_TIMEOUT:-300}
SAVE_TIMEOUT=${SAVE_TIMEOUT:-180}
STRICT=${STRICT:-0}
LIMITS=${LIMITS:-on}
[[ $LIMITS == on || $LIMITS == off ]] || { echo "LIMITS must be on or off" >&2; exit 2; }
# info, not warn: the engine logs only start-up events at info ("backfilling
# history", "market data ready"), which tell when the state is saved and
# whether a start backfilled; there is no per-request logging at info.
LOG_LEVEL=${LOG_LEVEL:-info}

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '[markets.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

# ---------------------------------------------------------------- cleanup
TMP=$(mktemp -d -t coinpulse-bench.XXXXXX)
SERVER_PID=""
NGINX_PID=""
TOP_PID=""
cleanup() {
	local rc=$?
	set +e
	if [[ -n $TOP_PID ]]; then kill "$TOP_PID" 2>/dev/null; wait "$TOP_PID" 2>/dev/null; fi
	if [[ -n $NGINX_PID ]] && kill -0 "$NGINX_PID" 2>/dev/null; then
		kill -QUIT "$NGINX_PID" 2>/dev/null
		for _ in $(seq 50); do kill -0 "$NGINX_PID" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$NGINX_PID" 2>/dev/null
		wait "$NGINX_PID" 2>/dev/null
	fi
	if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
		kill -TERM "$SERVER_PID" 2>/dev/null
		for _ in $(seq 200); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$SERVER_PID" 2>/dev/null
		wait "$SERVER_PID" 2>/dev/null
	fi
	if [[ $rc -ne 0 && -d $TMP ]]; then
		for f in "$TMP"/*.err "$TMP"/nginx-error.log; do
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
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || need+=(nginx)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v jq >/dev/null 2>&1 || need+=(jq)
if ((${#need[@]})); then
	log "installing ${need[*]} from Debian"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq "${need[@]}" >&2
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
command -v go >/dev/null 2>&1 || die "go is not on PATH"

REV=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git status --porcelain --untracked-files=no -- . ':!bench' 2>/dev/null) ]]; then REV="$REV+local changes"; fi
log "building coinpulse ($REV)"
go build -o "$TMP/coinpulse" ./cmd/coinpulse
BIN=$TMP/coinpulse
NCPU=$(nproc)

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
now_ns() { date +%s%N; }
secs_since() { awk -v a="$1" -v b="$(now_ns)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }'; }

# start_server NAME DATADIR PORT [extra flags...]: launches serve in the
# background, sets SERVER_PID and START_NS (taken just before launch).
start_server() {
	local name=$1 dir=$2 port=$3
	shift 3
	mkdir -p "$dir"
	START_NS=$(now_ns)
	"$BIN" serve --addr "127.0.0.1:$port" --data-dir "$dir" --refresh 60s --log-level "$LOG_LEVEL" "$@" \
		>"$TMP/$name.out" 2>"$TMP/$name.err" &
	SERVER_PID=$!
}

# wait_ready PORT: polls /readyz every 50 ms until 200; prints the seconds
# since START_NS.
wait_ready() {
	local port=$1 code deadline
	deadline=$(($(date +%s) + READY_TIMEOUT))
	while :; do
		code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/readyz" || true)
		if [[ $code == 200 ]]; then
			secs_since "$START_NS"
			return 0
		fi
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

# wait_saved NAME: waits until serve logged "market data ready", which the
# engine logs after it saved its state (snapshot, and so /readyz, come
# first); prints the seconds since START_NS, or "n/a" after SAVE_TIMEOUT.
wait_saved() {
	local name=$1 deadline
	deadline=$(($(date +%s) + SAVE_TIMEOUT))
	while ! grep -q 'market data ready' "$TMP/$name.err"; do
		kill -0 "$SERVER_PID" 2>/dev/null || die "serve (pid $SERVER_PID) exited"
		if (($(date +%s) >= deadline)); then
			log "no 'market data ready' log line after ${SAVE_TIMEOUT}s; stopping anyway"
			echo n/a
			return 0
		fi
		sleep 0.05
	done
	secs_since "$START_NS"
}
backfilled() { grep -q 'backfilling history' "$TMP/$1.err" && echo yes || echo no; }

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
cpu_secs() { awk -v t="$(cpu_ticks "$1")" -v hz="$CLK_TCK" 'BEGIN { printf "%.1f", t / hz }'; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
# busy_ticks: the machine's non-idle clock ticks (all CPUs).
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
# child_ticks FILE: CPU ticks of this shell's reaped children (wrk, mostly)
# from a `times` output saved in FILE. `times` itself must run in the main
# shell, not in a $(...) subshell, to see them.
child_ticks() {
	awk -v hz="$CLK_TCK" 'NR == 2 {
		t = 0
		for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] }
		printf "%d", t * hz
	}' "$1"
}

hwm_mb() { awk '/^VmHWM:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
rss_mb() { awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }

# wrk output parsing ------------------------------------------------------
wrk_rps() { awk '/^Requests\/sec:/ { print $2 }' "$1"; }
wrk_non2xx() { awk -F: '/Non-2xx or 3xx responses/ { gsub(/ /, "", $2); print $2 }' "$1"; }
wrk_sockerr() { sed -n 's/^ *Socket errors: *//p' "$1"; }
wrk_reqs() { awk '/requests in/ { print $1; exit }' "$1"; }
wrk_secs() { awk '/requests in/ { sub(/s,?$/, "", $4); print $4; exit }' "$1"; }
wrk_xfer() { awk '/^Transfer\/sec:/ { print $2 }' "$1"; }
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

# run_wrk NAME URL CONNS [wrk args...]: runs wrk, keeps its output in
# $TMP/wrk-NAME.txt and echoes it to stderr.
run_wrk() {
	local name=$1 url=$2 conns=$3
	shift 3
	local pids c0 c1 b0 b1 w0 w1
	if [[ $name == nginx* ]]; then pids="$NGINX_PID $(pgrep -P "$NGINX_PID" | tr '\n' ' ')"; else pids=$SERVER_PID; fi
	log "wrk $name: -t$THREADS -c$conns -d$DURATION $url (load average $(loadavg))"
	times >"$TMP/times0.txt"
	c0=$(cpu_ticks $pids) b0=$(busy_ticks)
	wrk -t"$THREADS" -c"$conns" -d"$DURATION" --latency "$@" "$url" >"$TMP/wrk-$name.txt" 2>&1 ||
		{ cat "$TMP/wrk-$name.txt" >&2; die "wrk $name failed"; }
	c1=$(cpu_ticks $pids) b1=$(busy_ticks)
	times >"$TMP/times1.txt"
	w0=$(child_ticks "$TMP/times0.txt") w1=$(child_ticks "$TMP/times1.txt")
	echo $((c1 - c0)) >"$TMP/cpu-$name.txt"
	# CPU the rest of the machine used meanwhile (not the target, not wrk).
	awk -v o=$((b1 - b0 - (c1 - c0) - (w1 - w0))) -v hz="$CLK_TCK" -v d="$(wrk_secs "$TMP/wrk-$name.txt")" \
		'BEGIN { x = o / hz / d; printf "%.2f", (x < 0 ? 0 : x) }' >"$TMP/other-$name.txt"
	sed 's/^/    /' "$TMP/wrk-$name.txt" >&2
	[[ -n $(wrk_rps "$TMP/wrk-$name.txt") ]] || die "no Requests/sec in wrk $name output"
}

# ---------------------------------------------------------------- 2. start-up
PORT=$(free_port)
LOAD_START=$(loadavg)

log "fresh start, default universe (1,000 coins); SIGTERM as soon as it is ready"
start_server fresh1k "$TMP/data-1k" "$PORT"
T_FRESH_1K=$(wait_ready "$PORT")
CPU_FRESH_1K=$(cpu_secs "$SERVER_PID")
HWM_FRESH_1K=$(hwm_mb "$SERVER_PID")
log "ready in ${T_FRESH_1K}s"
stop_server
grep -q 'live key: *sk_live_' "$TMP/fresh1k.out" || die "fresh start printed no demo live key"
grep -q 'sandbox key: *sk_test_' "$TMP/fresh1k.out" || die "fresh start printed no demo sandbox key"

log "warm start, 1,000 coins, after that immediate stop"
start_server warm1k "$TMP/data-1k" "$PORT"
T_WARM_1K=$(wait_ready "$PORT")
CPU_WARM_1K=$(cpu_secs "$SERVER_PID")
BF_WARM_1K=$(backfilled warm1k)
log "ready in ${T_WARM_1K}s (backfilled again: $BF_WARM_1K)"
stop_server

DATA=$TMP/data-$COINS
log "fresh start, --sim-coins $COINS"
start_server fresh "$DATA" "$PORT" --sim-coins "$COINS"
T_FRESH=$(wait_ready "$PORT")
CPU_FRESH=$(cpu_secs "$SERVER_PID")
HWM_FRESH=$(hwm_mb "$SERVER_PID")
log "ready in ${T_FRESH}s (peak RSS at ready ${HWM_FRESH} MB); waiting for the state to be saved"
T_SAVED=$(wait_saved fresh)
HWM_FRESH_SAVED=$(hwm_mb "$SERVER_PID")
log "state saved at ${T_SAVED}s (peak RSS ${HWM_FRESH_SAVED} MB)"
stop_server
DATA_SIZE=$(du -sh "$DATA" | cut -f1)

# The plan of the bench account: pro, whose limits would refuse most of
# wrk's calls, lifted so that none is (LIMITS=on).
PLANS=$TMP/plans.json
jq '(.plans[] | select(.tier == "pro")) |= (.per_second = 100000000 | .per_minute = 100000000 | .monthly_calls = "unlimited")' \
	plans/default.json >"$PLANS"
[[ $(jq -r '.plans[] | select(.tier == "pro") | "\(.per_second) \(.per_minute) \(.monthly_calls)"' "$PLANS") == "100000000 100000000 unlimited" ]] ||
	die "could not lift the pro plan in $PLANS"
LIMIT_FLAGS=(--plans "$PLANS")
[[ $LIMITS == off ]] && LIMIT_FLAGS=(--limits off)

log "warm start, --sim-coins $COINS (same data dir, $DATA_SIZE), limits $LIMITS"
start_server warm "$DATA" "$PORT" --sim-coins "$COINS" "${LIMIT_FLAGS[@]}"
T_WARM=$(wait_ready "$PORT")
CPU_WARM=$(cpu_secs "$SERVER_PID")
BF_WARM=$(backfilled warm)
HWM_WARM_READY=$(hwm_mb "$SERVER_PID")
HOUR_READY=$(date -u +%Y%m%d%H)
log "ready in ${T_WARM}s (backfilled again: $BF_WARM; peak RSS ${HWM_WARM_READY} MB)"
BASE=http://127.0.0.1:$PORT
RSS_IDLE=$(rss_mb "$SERVER_PID")

# ---------------------------------------------------------------- 3. key, body, nginx
EMAIL=bench-$$@example.com
"$BIN" users create --data-dir "$DATA" --email "$EMAIL" --tier pro >&2
KEY=$("$BIN" keys create --data-dir "$DATA" --email "$EMAIL")
[[ $KEY == sk_live_* || $KEY == sk_test_* ]] || die "keys create printed no key: $KEY"

PATH_Q='/api/v1/markets?per_page=100'
URL_CP=$BASE$PATH_Q
mkdir -p "$TMP/www"
chmod 0755 "$TMP" "$TMP/www" # nginx workers run as nobody
CODE=$(curl -s -o "$TMP/www/markets.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" "$URL_CP")
[[ $CODE == 200 ]] || { cat "$TMP/www/markets.json" >&2; die "GET $PATH_Q answered $CODE"; }
chmod 0644 "$TMP/www/markets.json"
BODY_BYTES=$(stat -c %s "$TMP/www/markets.json")
ITEMS=$(grep -o '"market_cap_rank"' "$TMP/www/markets.json" | wc -l)
((ITEMS == 100)) || die "expected 100 items in the markets body, got $ITEMS"
log "markets body: $BODY_BYTES bytes, $ITEMS items"

NGINX_PORT=$(free_port)
while [[ $NGINX_PORT == "$PORT" ]]; do NGINX_PORT=$(free_port); done
cat >"$TMP/nginx.conf" <<EOF
worker_processes auto;
pid $TMP/nginx.pid;
error_log $TMP/nginx-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    default_type application/json;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 120s;
    keepalive_requests 100000000;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        root $TMP/www;
        location = /markets.json { }
    }
}
EOF
"$NGINX" -t -q -p "$TMP" -e "$TMP/nginx-error.log" -c "$TMP/nginx.conf" 2>"$TMP/nginx-test.err" ||
	{ cat "$TMP/nginx-test.err" >&2; die "nginx config test failed"; }
"$NGINX" -p "$TMP" -e "$TMP/nginx-error.log" -c "$TMP/nginx.conf" -g 'daemon off;' 2>>"$TMP/nginx-error.log" &
NGINX_PID=$!
URL_NG=http://127.0.0.1:$NGINX_PORT/markets.json
for _ in $(seq 100); do
	curl -s -o /dev/null "$URL_NG" && break
	kill -0 "$NGINX_PID" 2>/dev/null || die "nginx exited"
	sleep 0.05
done
CT=$(curl -s -o "$TMP/nginx-body.json" -w '%{http_code} %{content_type}' "$URL_NG")
[[ $CT == "200 application/json" ]] || die "nginx answered '$CT'"
cmp "$TMP/www/markets.json" "$TMP/nginx-body.json" || die "nginx body differs from the server's"
log "nginx on :$NGINX_PORT serves the identical body ($BODY_BYTES bytes)"

# ---------------------------------------------------------------- 4. load
# top snapshots of the serve process during the first Coinpulse pass.
sample_top() {
	local d=${DURATION%s}
	[[ $d =~ ^[0-9]+$ ]] || d=15
	sleep $((d / 3 > 0 ? d / 3 : 1))
	top -b -n 1 -w 200 >"$TMP/top.txt" 2>&1 || true
}

for round in $(seq "$ROUNDS"); do
	run_wrk "nginx-$round" "$URL_NG" "$CONNS"
	if ((round == 1)); then
		sample_top &
		TOP_PID=$!
	fi
	run_wrk "coinpulse-$round" "$URL_CP" "$CONNS" -H "Authorization: Bearer $KEY"
	if ((round == 1)); then
		wait "$TOP_PID" || true
		TOP_PID=""
	fi
done
run_wrk nginx-low "$URL_NG" "$LOW_CONNS"
run_wrk coinpulse-low "$URL_CP" "$LOW_CONNS" -H "Authorization: Bearer $KEY"

kill -0 "$SERVER_PID" 2>/dev/null || die "serve died during the load"
HWM=$(hwm_mb "$SERVER_PID")
HOUR_TURNED=no
[[ $(date -u +%Y%m%d%H) == "$HOUR_READY" ]] || HOUR_TURNED=yes
RSS_AFTER=$(rss_mb "$SERVER_PID")
# The server must still answer correctly after the load.
CODE=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $KEY" "$URL_CP")
[[ $CODE == 200 ]] || die "after the load GET $PATH_Q answered $CODE"

# ---------------------------------------------------------------- 5. summary
best() { # best PREFIX: the PREFIX-N run with the most requests/s
	local r b="" bv=-1 v
	for r in $(seq "$ROUNDS"); do
		v=$(wrk_rps "$TMP/wrk-$1-$r.txt")
		if awk -v v="$v" -v b="$bv" 'BEGIN { exit !(v + 0 > b + 0) }'; then b=$1-$r bv=$v; fi
	done
	echo "$b"
}
NG_BEST=$(best nginx)
CP_BEST=$(best coinpulse)
NG_RPS=$(wrk_rps "$TMP/wrk-$NG_BEST.txt")
CP_RPS=$(wrk_rps "$TMP/wrk-$CP_BEST.txt")
NG_P99=$(wrk_p99 "$TMP/wrk-$NG_BEST.txt")
CP_P99=$(wrk_p99 "$TMP/wrk-$CP_BEST.txt")
NG_LOW_RPS=$(wrk_rps "$TMP/wrk-nginx-low.txt")
CP_LOW_RPS=$(wrk_rps "$TMP/wrk-coinpulse-low.txt")
NG_LOW_P99=$(wrk_p99 "$TMP/wrk-nginx-low.txt")
CP_LOW_P99=$(wrk_p99 "$TMP/wrk-coinpulse-low.txt")
RATIO=$(awk -v c="$CP_RPS" -v n="$NG_RPS" 'BEGIN { printf "%.2f", c / n }')
RATIO_LOW=$(awk -v c="$CP_LOW_RPS" -v n="$NG_LOW_RPS" 'BEGIN { printf "%.2f", c / n }')

verdict() { # verdict VALUE OP LIMIT
	awk -v v="$1" -v l="$3" -v op="$2" 'BEGIN {
		ok = (op == "<") ? (v + 0 < l + 0) : (v + 0 >= l + 0)
		print ok ? "met" : "MISSED"
	}'
}
# The verdict takes the exact ratio: 0.695 is not a 0.70 that meets 0.7.
G_RATIO=$(verdict "$(awk -v c="$CP_RPS" -v n="$NG_RPS" 'BEGIN { printf "%.9f", c / n }')" '>=' 0.7)
G_P99=$(verdict "$CP_P99" '<' 5)
G_P99_LOW=$(verdict "$CP_LOW_P99" '<' 5)
G_FRESH=$(verdict "$T_FRESH" '<' 20)
G_WARM=$(verdict "$T_WARM" '<' 1)
G_RSS=$(verdict "$HWM" '<' 250)

# cpu_line NAME: "<cores busy> / <CPU ms per 1k requests>" of the target
# during run NAME (from /proc/PID/stat ticks and wrk's request count).
cpu_line() {
	awk -v t="$(cat "$TMP/cpu-$1.txt")" -v hz="$CLK_TCK" -v n="$(wrk_reqs "$TMP/wrk-$1.txt")" \
		-v d="$(wrk_secs "$TMP/wrk-$1.txt")" 'BEGIN { printf "%.2f / %.1f", t / hz / d, t / hz * 1000 / n * 1000 }'
}

{
	echo
	echo "== Coinpulse markets benchmark  $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit: $REV"
	echo "machine: $NCPU CPUs, $(uname -sr); $(go version | cut -d' ' -f3); $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2); $("$NGINX" -v 2>&1 | sed 's/.*: //')"
	echo "load average (1/5/15 min) at start: $LOAD_START; at end: $(loadavg)"
	echo "wrk: -t$THREADS -c$CONNS -d$DURATION --latency (keep-alive); moderate load -c$LOW_CONNS; best of $ROUNDS alternating runs"
	echo "body: GET $PATH_Q, $BODY_BYTES bytes, $ITEMS items; universe $COINS coins; serve --log-level $LOG_LEVEL"
	if [[ $LIMITS == on ]]; then
		echo "limits: on (rate limits and metering, the nine header entries), tier pro lifted to 100000000 calls a second and a minute, monthly unlimited"
	else
		echo "limits: off (--limits off)"
	fi
	echo
	printf '%-42s %14s %14s %7s\n' "throughput (-c$CONNS)" nginx coinpulse ratio
	printf '%-42s %14s %14s %7s\n' "  requests/s (best of $ROUNDS)" "$NG_RPS" "$CP_RPS" "$RATIO"
	for r in $(seq "$ROUNDS"); do
		printf '%-42s %14s %14s\n' "  requests/s run $r (other load, cores)" \
			"$(wrk_rps "$TMP/wrk-nginx-$r.txt") ($(cat "$TMP/other-nginx-$r.txt"))" \
			"$(wrk_rps "$TMP/wrk-coinpulse-$r.txt") ($(cat "$TMP/other-coinpulse-$r.txt"))"
	done
	printf '%-42s %14s %14s\n' "  p99 latency ms (best run)" "$NG_P99" "$CP_P99"
	printf '%-42s %14s %14s\n' "  transfer/s (best run)" "$(wrk_xfer "$TMP/wrk-$NG_BEST.txt")" "$(wrk_xfer "$TMP/wrk-$CP_BEST.txt")"
	printf '%-42s %14s %14s\n' "  cores busy / CPU ms per 1k req (best)" "$(cpu_line "$NG_BEST")" "$(cpu_line "$CP_BEST")"
	printf '%-42s %14s %14s %7s\n' "moderate load (-c$LOW_CONNS) requests/s" "$NG_LOW_RPS" "$CP_LOW_RPS" "$RATIO_LOW"
	printf '%-42s %14s %14s\n' "  p99 latency ms" "$NG_LOW_P99" "$CP_LOW_P99"
	printf '%-42s %14s %14s\n' "  cores busy / CPU ms per 1k req" "$(cpu_line nginx-low)" "$(cpu_line coinpulse-low)"
	printf '%-42s %14s %14s\n' "  other load, cores" "$(cat "$TMP/other-nginx-low.txt")" "$(cat "$TMP/other-coinpulse-low.txt")"
	echo "(other load: CPU used by processes other than the target and wrk during the pass; above ~0.3 the pass was disturbed)"
	echo
	printf '%-52s %10s %10s\n' "start-up (launch to first 200 from /readyz)" seconds "CPU s"
	printf '%-52s %10s %10s\n' "  fresh, 1,000 coins" "$T_FRESH_1K" "$CPU_FRESH_1K"
	printf '%-52s %10s %10s\n' "  warm, 1,000 coins, after SIGTERM right at ready" "$T_WARM_1K" "$CPU_WARM_1K"
	printf '%-52s %10s\n' "    ...backfilled again (state lost)" "$BF_WARM_1K"
	printf '%-52s %10s %10s\n' "  fresh, $COINS coins (full backfill)" "$T_FRESH" "$CPU_FRESH"
	printf '%-52s %10s\n' "    ...state saved (\"market data ready\" logged)" "$T_SAVED"
	printf '%-52s %10s %10s\n' "  warm, $COINS coins" "$T_WARM" "$CPU_WARM"
	printf '%-52s %10s\n' "    ...backfilled again" "$BF_WARM"
	echo
	printf '%-52s %10s\n' "memory (serve process)" MB
	printf '%-52s %10s\n' "  peak RSS (VmHWM), $COINS coins, warm, after load" "$HWM"
	printf '%-52s %10s\n' "    ...an hour turned (hourly rollup + state save)" "$HOUR_TURNED"
	printf '%-52s %10s\n' "  peak RSS, $COINS coins, warm, at ready" "$HWM_WARM_READY"
	printf '%-52s %10s\n' "  RSS after warm start / after load" "$RSS_IDLE / $RSS_AFTER"
	printf '%-52s %10s\n' "  peak RSS, $COINS coins, fresh, at ready" "$HWM_FRESH"
	printf '%-52s %10s\n' "  peak RSS, $COINS coins, fresh, state saved" "$HWM_FRESH_SAVED"
	printf '%-52s %10s\n' "  peak RSS, 1,000 coins, fresh, at ready" "$HWM_FRESH_1K"
	printf '%-52s %10s\n' "data dir size, $COINS coins" "$DATA_SIZE"
	echo
	echo "goals"
	printf '  %-50s %-7s %s\n' "coinpulse/nginx throughput >= 0.70 (-c$CONNS)" "$G_RATIO" "$RATIO"
	printf '  %-50s %-7s %s\n' "coinpulse p99 < 5 ms at -c$CONNS" "$G_P99" "$CP_P99 ms"
	printf '  %-50s %-7s %s\n' "coinpulse p99 < 5 ms at -c$LOW_CONNS" "$G_P99_LOW" "$CP_LOW_P99 ms"
	printf '  %-50s %-7s %s\n' "fresh start to ready < 20 s ($COINS coins)" "$G_FRESH" "$T_FRESH s"
	printf '  %-50s %-7s %s\n' "warm start to ready < 1 s ($COINS coins)" "$G_WARM" "$T_WARM s"
	printf '  %-50s %-7s %s\n' "peak RSS < 250 MB ($COINS coins)" "$G_RSS" "$HWM MB"

	echo
	FAILED=0
	for run in $(cd "$TMP" && ls wrk-*.txt | sed 's/^wrk-//; s/\.txt$//'); do
		n=$(wrk_non2xx "$TMP/wrk-$run.txt")
		e=$(wrk_sockerr "$TMP/wrk-$run.txt")
		if [[ -n $n ]]; then echo "wrk $run: Non-2xx or 3xx responses: $n"; fi
		if [[ -n $e ]]; then echo "wrk $run: Socket errors: $e"; fi
		if [[ -n $n && $run == coinpulse-* ]]; then FAILED=1; fi
	done
	if ((FAILED == 0)); then echo "non-2xx: none from coinpulse"; fi

	if [[ -s $TMP/top.txt ]]; then
		echo
		echo "top, a third of the way into coinpulse-1:"
		awk 'NR <= 3 || NR == 7 || (NR >= 8 && $9 + 0 > 0 && ++n <= 8)' "$TMP/top.txt" | sed 's/^/  /'
	fi
} | tee "$TMP/summary.txt"

if grep -q "^wrk coinpulse-.*Non-2xx" "$TMP/summary.txt"; then
	die "coinpulse answered non-2xx during the load"
fi
if [[ $STRICT == 1 ]] && grep -q MISSED "$TMP/summary.txt"; then
	die "a goal was missed (STRICT=1)"
fi
log "done"
