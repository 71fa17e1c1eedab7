#!/usr/bin/env bash
# run.sh — what `make run` does: start eventq locally with everything it needs.
#
#   1. makes sure curl and redis-server are installed (apt-get when root);
#   2. builds bin/api, bin/worker and bin/eventq;
#   3. starts its own redis-server (data and AOF under ./var/redis) on 127.0.0.1:6390
#      (EVENTQ_RUN_REDIS_PORT) and exports REDIS_URL for it, unless REDIS_URL is set; it reuses
#      a Redis answering on that port only if it is this checkout's (its dir is ./var/redis)
#      and otherwise stops. For a REDIS_URL or REDIS_<NAME>_URL you set on a local port, it
#      starts a redis-server unless one already answers there, and says so when that one is
#      not make run's;
#   4. runs `bin/eventq migrate` on DATABASE_URL (default: SQLite in ./var/eventq.db);
#   5. when no webhook signing secret is configured (PSP_WEBHOOK_SECRET or its alias
#      STRIPE_WEBHOOK_SECRET), uses a random local one kept in ./var/webhook-secret, so that
#      `bin/eventq webhook send` can sign test events the api accepts;
#   6. writes ./var/run.env (mode 600): the settings bin/eventq needs to reach the same
#      database, Redis and api from another terminal (`. var/run.env`);
#   7. starts bin/worker and bin/api, logging to ./var/log/, and waits for /healthz.
#
# Ctrl-C (INT), TERM or HUP stops everything this script started: api, worker, then Redis; so
# does the end of its parent (make), however it ended.
# Configuration comes from the environment variables of docs/configuration.md; none is needed.
# shellcheck disable=SC2317 # on_exit and stop_all run from traps
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd -P)
VAR=$ROOT/var
LOGS=$VAR/log
PIDS=$VAR/run

say() { printf 'make run: %s\n' "$*"; }
die() {
	printf 'make run: %s\n' "$*" >&2
	exit 1
}

# ---- processes -------------------------------------------------------------------------------

started=() # "name:pid" of every process this run started, in start order

# running PID: is PID alive and not a zombie?
running() {
	local stat
	stat=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
	[[ ${stat%% *} != Z ]]
}

# stop NAME PID: TERM, up to 15 s of grace, then KILL; reaps PID when it is our child.
stop() {
	local name=$1 pid=$2 i
	if running "$pid"; then
		say "stopping $name (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 150; i++)); do
			running "$pid" || break
			sleep 0.1
		done
		if running "$pid"; then
			say "$name did not stop within 15s: killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	wait "$pid" 2>/dev/null || true
	rm -f "$PIDS/$name.pid"
}

stop_all() {
	local i entry
	for ((i = ${#started[@]} - 1; i >= 0; i--)); do
		entry=${started[i]}
		stop "${entry%%:*}" "${entry#*:}"
	done
	started=()
}

# spawn NAME LOG CMD...: start CMD in its own session (so a Ctrl-C reaches only this script,
# which then stops the children in order), output appended to LOG.
spawn() {
	local name=$1 log=$2 pid
	shift 2
	setsid "$@" >>"$log" 2>&1 </dev/null 9>&- &
	pid=$!
	started+=("$name:$pid")
	echo "$pid" >"$PIDS/$name.pid"
}

# tail_log NAME LOG: show the end of a child's log after it failed.
# rotate_log FILE: starts FILE empty, keeping the three previous runs' logs as FILE.1 (the
# last) to FILE.3.
rotate_log() {
	local f=$1 i
	for i in 2 1; do
		[[ -f $f.$i ]] && mv -f "$f.$i" "$f.$((i + 1))"
	done
	[[ -s $f ]] && mv -f "$f" "$f.1"
	: >"$f"
}

tail_log() {
	printf 'make run: last lines of %s:\n' "${2#"$ROOT"/}" >&2
	tail -n 20 "$2" | sed 's/^/    /' >&2
}

stopping=0
on_exit() {
	local rc=$?
	# Ignore repeated signals (Ctrl-C pressed twice, make forwarding TERM to us while the
	# terminal also sends it) so that cleanup finishes; each stop ends in KILL after 15 s.
	trap '' INT TERM HUP
	trap - EXIT
	((${#started[@]})) && stop_all
	if ((stopping)); then
		say "stopped"
		exit 0
	fi
	exit "$rc"
}
trap on_exit EXIT
trap 'stopping=1; exit' INT TERM HUP

# Leftovers of a run that was killed without cleaning up (kill -9, closed terminal): stop them,
# but only if they are still this checkout's processes.
stop_stale() {
	local file name pid cmd
	for file in "$PIDS"/api.pid "$PIDS"/worker.pid "$PIDS"/redis*.pid; do
		[[ -e $file ]] || continue
		name=$(basename "$file" .pid)
		pid=$(cat "$file" 2>/dev/null || true)
		rm -f "$file"
		if ! [[ $pid =~ ^[0-9]+$ ]] || ! running "$pid"; then
			continue
		fi
		case $name in
		redis*) [[ $(readlink "/proc/$pid/cwd" 2>/dev/null) == "$VAR/$name" ]] || continue ;;
		*)
			cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
			[[ $cmd == "$ROOT/bin/$name "* ]] || continue
			;;
		esac
		say "found $name (pid $pid) left over from an earlier run"
		stop "$name" "$pid"
	done
}

# ---- configuration ---------------------------------------------------------------------------

http_addr=${HTTP_ADDR:-127.0.0.1:8080}
http_host=${http_addr%:*}
http_port=${http_addr##*:}
case $http_host in
'' | 0.0.0.0) http_host=127.0.0.1 ;;
'[::]' | '::') http_host='[::1]' ;;
esac
[[ $http_port =~ ^[1-9][0-9]*$ ]] || die "HTTP_ADDR=$http_addr: make run needs a fixed port, e.g. 127.0.0.1:8080"
base_url="http://$http_host:$http_port"
# The public base URL (return pages, the default target of `eventq webhook send`) follows
# HTTP_ADDR unless APP_URL says otherwise.
app_url=${APP_URL:-}
[[ -n ${app_url//[[:space:]]/} ]] || export APP_URL=$base_url
database_url=${DATABASE_URL:-sqlite://var/eventq.db}

# make run's own Redis port, used when REDIS_URL is not set: not Redis's usual 6379, where a
# distribution's redis-server service may run with other settings (no AOF, other data).
run_redis_port=${EVENTQ_RUN_REDIS_PORT:-6390}
if ! [[ $run_redis_port =~ ^[1-9][0-9]{0,4}$ ]] || ((run_redis_port > 65535)); then
	die "EVENTQ_RUN_REDIS_PORT=$run_redis_port: want a TCP port number (default 6390)"
fi
run_redis_url=redis://127.0.0.1:$run_redis_port/0

# redact URL: the URL without its password.
redact() { sed -E 's#(://[^:/@]*:)[^@/]*@#\1***@#' <<<"$1"; }

# ---- dependencies and build ------------------------------------------------------------------

bash scripts/ensure-deps.sh go curl redis-server
bash scripts/ensure-deps.sh --soft jq # used by the README quick start

mkdir -p "$LOGS" "$PIDS"
exec 9>"$PIDS/lock"
flock -n 9 || die "another make run is already running in this checkout; stop it first (Ctrl-C in its terminal)"
stop_stale

say "building bin/api bin/worker bin/eventq"
# go build is silent while it compiles: a first build (an empty build cache) takes minutes on
# two cores, so a line every 15 s says it is still at it, and how many packages it has built.
(
	start=$SECONDS
	while sleep 15; do
		say "still building ($((SECONDS - start))s; $(go env GOCACHE | xargs -I{} find {} -newer "$PIDS/lock" -name '*-d' 2>/dev/null | wc -l) build outputs written so far)"
	done
) &
ticker=$!
go build -o bin/ ./cmd/... || {
	kill "$ticker" 2>/dev/null
	die "the build failed"
}
kill "$ticker" 2>/dev/null
wait "$ticker" 2>/dev/null || true

# ---- Redis -----------------------------------------------------------------------------------

redis_notes=()
declare -A redis_ports=() # port -> variable that first named it

# redis_cli PORT PASSWORD ARG...: redis-cli against 127.0.0.1:PORT; its output, errors included.
redis_cli() {
	local port=$1 password=$2
	shift 2
	if [[ -n $password ]]; then
		REDISCLI_AUTH=$password redis-cli --raw -h 127.0.0.1 -p "$port" "$@" 2>&1 || true
	else
		redis-cli --raw -h 127.0.0.1 -p "$port" "$@" 2>&1 || true
	fi
}

# redis_config PORT PASSWORD PARAM: the value of a Redis's CONFIG GET PARAM ("" if refused).
redis_config() {
	local out
	out=$(redis_cli "$1" "$2" config get "$3")
	[[ $(head -n 1 <<<"$out") == "$3" ]] && sed -n 2p <<<"$out"
	return 0
}

# start_redis NAME VAR URL OWN: make sure a Redis answers for the connection NAME. OWN is 1 for
# make run's own Redis (REDIS_URL not set): one answering on its port already is used only if
# it is this checkout's (its dir is var/redis or var/redis-NAME); any other stops make run.
start_redis() {
	local name=$1 var=$2 url=$3 own=$4 rest hostport host port password='' dir pidname log i pid answer
	local their_dir their_aof
	rest=${url#*://}
	rest=${rest%%/*}
	rest=${rest%%\?*}
	hostport=${rest##*@}
	if [[ $rest == *@* ]]; then
		password=${rest%@*}
		if [[ $password == *:* ]]; then
			password=${password#*:}
		else
			password='' # redis://user@host: a user name without password
		fi
	fi
	if [[ $hostport == \[* ]]; then
		host=${hostport%%]*}
		host=${host#[}
		port=${hostport#*]}
		port=${port#:}
	elif [[ $hostport == *:* ]]; then
		host=${hostport%:*}
		port=${hostport##*:}
	else
		host=$hostport
		port=''
	fi
	port=${port:-6379}
	case $host in
	'' | 127.0.0.1 | localhost | ::1) ;;
	*)
		say "$var points at $host: not starting a local Redis for it"
		redis_notes+=("$(redact "$url") ($var, not managed by make run)")
		return
		;;
	esac
	[[ $port =~ ^[0-9]+$ ]] || die "$var=$(redact "$url"): cannot read the port"
	if [[ -n ${redis_ports[$port]:-} ]]; then
		say "$var uses the same Redis as ${redis_ports[$port]} (127.0.0.1:$port)"
		return
	fi
	redis_ports[$port]=$var
	pidname=redis
	[[ $name == default ]] || pidname=redis-$name
	dir=$VAR/$pidname
	log=$LOGS/$pidname.log

	local -a auth=()
	[[ -n $password ]] && auth=(--requirepass "$password")
	answer=$(redis_cli "$port" "$password" ping)
	if [[ $answer == PONG ]]; then
		their_dir=$(redis_config "$port" "$password" dir)
		if [[ -n $their_dir && $their_dir == "$dir" ]]; then
			say "this checkout's Redis (data in ${dir#"$ROOT"/}) already answers on 127.0.0.1:$port ($var): using it, and leaving it running"
			redis_notes+=("$(redact "$url") ($var, this checkout's, already running, data in ${dir#"$ROOT"/}; not stopped by make run)")
			return
		fi
		if ((own)); then
			die "127.0.0.1:$port, where make run runs its own Redis, is taken by a Redis that make run did not start (its data dir: ${their_dir:-unknown}). make run does not use another Redis unasked: stop that one, or choose another port with EVENTQ_RUN_REDIS_PORT=PORT, or set REDIS_URL to use a Redis of your choice"
		fi
		their_aof=$(redis_config "$port" "$password" appendonly)
		say "NOTE: $var=$(redact "$url") names a Redis that make run did not start (data dir ${their_dir:-unknown}, appendonly ${their_aof:-unknown}): using it as you asked, with its own settings, and leaving it running"
		redis_notes+=("$(redact "$url") ($var, NOT started by make run: data dir ${their_dir:-unknown}, appendonly ${their_aof:-unknown}; left running)")
		return
	fi
	case $answer in
	*NOAUTH* | *WRONGPASS* | *"invalid password"* | *"invalid username-password"*)
		((own)) && die "127.0.0.1:$port, where make run runs its own Redis, is taken by a Redis that make run did not start (it wants a password). Stop that one, or choose another port with EVENTQ_RUN_REDIS_PORT=PORT"
		die "a Redis answers on 127.0.0.1:$port ($var) but refuses the password of $var: \"$answer\""
		;;
	*"Could not connect"* | *"Connection refused"*) ;;
	*) die "something answers on 127.0.0.1:$port ($var) but not as Redis: \"$answer\"; free the port or change $var" ;;
	esac

	mkdir -p "$dir"
	rotate_log "$log"
	say "starting redis-server on 127.0.0.1:$port for $var (data and AOF in ${dir#"$ROOT"/})"
	# The output buffer limit: a client that does not read its replies holds at most 64 MB
	# (docs/operations.md, "Redis memory and slow readers").
	spawn "$pidname" "$log" redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" \
		--appendonly yes --client-output-buffer-limit "normal 64mb 32mb 60" --daemonize no "${auth[@]}"
	pid=${started[-1]#*:}
	for ((i = 0; i < 100; i++)); do
		if ! running "$pid"; then
			tail_log "$pidname" "$log"
			die "redis-server for $var exited during start-up"
		fi
		answer=$(redis_cli "$port" "$password" ping)
		[[ $answer == PONG ]] && break
		sleep 0.1
	done
	[[ $answer == PONG ]] || {
		tail_log "$pidname" "$log"
		die "redis-server on port $port did not answer PING within 10s"
	}
	redis_notes+=("$(redact "$url") ($var, started by make run, data in ${dir#"$ROOT"/}, log ${log#"$ROOT"/})")
}

redis_url=${REDIS_URL:-}
if [[ -n ${REDIS_CLUSTER_ADDRS:-} ]]; then
	say "REDIS_CLUSTER_ADDRS is set: using that cluster for the default connection, not starting a Redis for it"
	redis_notes+=("cluster $REDIS_CLUSTER_ADDRS (REDIS_CLUSTER_ADDRS, not managed by make run)")
elif [[ -z ${redis_url//[[:space:]]/} ]]; then
	export REDIS_URL=$run_redis_url
	start_redis default REDIS_URL "$REDIS_URL" 1
else
	start_redis default REDIS_URL "$REDIS_URL" 0
fi
while IFS= read -r var; do
	[[ $var =~ ^REDIS_(.+)_URL$ && -n ${!var} ]] || continue
	name=$(tr '[:upper:]' '[:lower:]' <<<"${BASH_REMATCH[1]}")
	start_redis "$name" "$var" "${!var}" 0
done < <(compgen -e | sort)

# ---- database --------------------------------------------------------------------------------

say "migrating $(redact "$database_url")"
if ! out=$("$ROOT/bin/eventq" migrate 2>&1); then
	printf '%s\n' "$out" >&2
	die "bin/eventq migrate failed"
fi

# ---- webhook signing secret ------------------------------------------------------------------

# The secret config.Load would use: PSP_WEBHOOK_SECRET when it is not blank, else the alias
# STRIPE_WEBHOOK_SECRET; a comma list of secrets (rotation) is allowed.
webhook_secret=${PSP_WEBHOOK_SECRET:-}
[[ -n ${webhook_secret//[[:space:]]/} ]] || webhook_secret=${STRIPE_WEBHOOK_SECRET:-}
secret_file=$VAR/webhook-secret
webhook_hint=''
if [[ -n ${webhook_secret//[[:space:],]/} ]]; then
	webhook_note="from the environment (PSP_WEBHOOK_SECRET or STRIPE_WEBHOOK_SECRET)"
else
	# None configured: a local secret, generated once and kept, so that a second terminal
	# (and the next make run) signs with the same value.
	secret=''
	[[ -f $secret_file ]] && secret=$(head -n 1 "$secret_file" 2>/dev/null | tr -d '[:space:]' || true)
	if [[ ! $secret =~ ^whsec_[A-Za-z0-9_]+$ ]]; then
		secret=whsec_local_$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
		[[ $secret =~ ^whsec_local_[0-9a-f]{32}$ ]] || die "could not generate a webhook signing secret from /dev/urandom"
		(
			umask 077
			printf '%s\n' "$secret" >"$secret_file.tmp"
		)
		mv -f "$secret_file.tmp" "$secret_file"
		say "generated a local webhook signing secret in var/webhook-secret"
	fi
	chmod 600 "$secret_file"
	export PSP_WEBHOOK_SECRET=$secret
	unset secret
	webhook_note="in var/webhook-secret (local; set PSP_WEBHOOK_SECRET to use your own)"
fi
# The local secret goes to var/run.env, also when it came back in through the environment (a
# terminal that loaded var/run.env runs make run again); a secret of your own does not.
local_secret=''
if [[ -f $secret_file && $(head -n 1 "$secret_file" 2>/dev/null | tr -d '[:space:]') == "${PSP_WEBHOOK_SECRET:-}" ]]; then
	local_secret=$PSP_WEBHOOK_SECRET
else
	webhook_hint='export PSP_WEBHOOK_SECRET yourself in the other terminal; var/run.env leaves it out'
fi
unset webhook_secret

# ---- var/run.env -----------------------------------------------------------------------------

# What bin/eventq in another terminal needs to reach the same database, Redis and api: the
# connection settings and addresses make run used (set or defaulted), and the local webhook
# secret. Provider keys and secrets of your own are not written.
run_env=$VAR/run.env

# sq VALUE: VALUE single-quoted for sh.
sq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# absolute_sqlite makes a SQLite URL's relative path absolute (from $ROOT), so that the CLI,
# run from any directory after `. var/run.env`, opens the same file instead of creating an
# empty one where it runs; other URLs pass unchanged.
absolute_sqlite() {
	local url=$1 path
	case $url in
	sqlite://*)
		path=${url#sqlite://}
		[[ $path == /* ]] || url="sqlite://$ROOT/$path"
		;;
	esac
	printf '%s' "$url"
}

write_run_env() {
	local var
	{
		printf '# Written by make run (scripts/run.sh): the settings its api and worker run with.\n'
		printf '# In another terminal, in %s:  . var/run.env\n' "$ROOT"
		printf 'export HTTP_ADDR=%s\n' "$(sq "$http_addr")"
		printf 'export APP_URL=%s\n' "$(sq "$APP_URL")"
		printf 'export DATABASE_URL=%s\n' "$(sq "$(absolute_sqlite "$database_url")")"
		if [[ -n ${REDIS_URL:-} ]]; then
			printf 'export REDIS_URL=%s\n' "$(sq "$REDIS_URL")"
		fi
		while IFS= read -r var; do
			case $var in
			REDIS_URL) continue ;;
			REDIS_*_URL | REDIS_CLUSTER_ADDRS | EVENTQUEUE_QUEUE_CONNECTION | EVENTQUEUE_MAX_LENGTH | EVENTQUEUE_MAX_DELIVERIES) ;;
			PSP_API_BASE | STRIPE_API_BASE) ;;
			*) continue ;;
			esac
			if [[ -n ${!var} ]]; then
				printf 'export %s=%s\n' "$var" "$(sq "${!var}")"
			fi
		done < <(compgen -e | sort)
		if [[ -n $local_secret ]]; then
			printf 'export PSP_WEBHOOK_SECRET=%s\n' "$(sq "$local_secret")"
		fi
	} >"$run_env.tmp"
	chmod 600 "$run_env.tmp"
	mv -f "$run_env.tmp" "$run_env"
}
(
	umask 077
	write_run_env
)

# ---- api and worker --------------------------------------------------------------------------

if curl -fsS -o /dev/null --max-time 2 "$base_url/healthz" 2>/dev/null; then
	die "something already answers on $base_url (another eventq?): stop it or set HTTP_ADDR"
fi

rotate_log "$LOGS/worker.log"
rotate_log "$LOGS/api.log"
say "starting worker (log var/log/worker.log)"
spawn worker "$LOGS/worker.log" "$ROOT/bin/worker"
say "starting api on $http_addr (log var/log/api.log)"
spawn api "$LOGS/api.log" "$ROOT/bin/api"

api_pid=${started[-1]#*:}
worker_pid=${started[-2]#*:}
for ((i = 0; ; i++)); do
	running "$api_pid" || {
		tail_log api "$LOGS/api.log"
		die "api exited during start-up"
	}
	running "$worker_pid" || {
		tail_log worker "$LOGS/worker.log"
		die "worker exited during start-up"
	}
	curl -fsS -o /dev/null --max-time 2 "$base_url/healthz" 2>/dev/null && break
	((i < 300)) || {
		tail_log api "$LOGS/api.log"
		die "api did not answer $base_url/healthz within 30s"
	}
	sleep 0.1
done

cat <<EOF

eventq is running.
  base URL   $base_url   (GET /healthz, /readyz; /metrics on ${METRICS_ADDR:-127.0.0.1:9464})
  database   $(redact "$database_url")
EOF
for note in "${redis_notes[@]}"; do
	printf '  redis      %s\n' "$note"
done
if [[ -n ${ADMIN_API_TOKENS:-} ]]; then
	printf '  operator   %s/api/admin/* with one of ADMIN_API_TOKENS\n' "$base_url"
else
	printf '  operator   off (/api/admin/* answers 404): run  ADMIN_API_TOKENS=$(openssl rand -hex 32) make run  to turn it on\n'
fi
printf '  webhook    %s/api/webhooks/psp, signing secret %s\n' "$base_url" "$webhook_note"
[[ -z $webhook_hint ]] || printf '             for bin/eventq webhook send: %s\n' "$webhook_hint"
cat <<EOF
  logs       var/log/api.log, var/log/worker.log   (tail -f var/log/*.log; earlier runs in *.log.1 to .3)
  bin/eventq var/run.env: its settings for the CLI

Next: in a second terminal in $ROOT, run  . var/run.env  once, then follow
"Quick start" in README.md.
Press Ctrl-C to stop everything make run started.

EOF

# ---- wait ------------------------------------------------------------------------------------

# Until a signal arrives (the trap stops everything), a child exits on its own, or the process
# that started this script is gone. The last is make killed with SIGKILL (or a terminal closed
# under a backgrounded make run): nothing would pass a signal on, so without this check the
# script and its servers would run on with nobody to stop them.
parent=$PPID
parent_of() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f2; }
while :; do
	for entry in "${started[@]}"; do
		if ! running "${entry#*:}"; then
			name=${entry%%:*}
			say "$name exited unexpectedly; stopping the rest"
			tail_log "$name" "$LOGS/$name.log"
			exit 1
		fi
	done
	if [[ $(parent_of $$) != "$parent" ]]; then
		say "its parent process (pid $parent, make) is gone"
		stopping=1
		exit
	fi
	sleep 1 &
	wait $! || true # a trapped signal ends the wait at once
done
