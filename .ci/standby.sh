#!/usr/bin/env bash
# A streaming standby of the local PostgreSQL, for the replica tests (docs/design.md §17.3,
# docs/scaling.md). Usage: .ci/standby.sh start|halt|stop|status
#
#   start   pg_basebackup -R of the primary into $STANDBY_DIR (default .ci-standby/ under the
#           checkout), then starts it on $STANDBY_PORT (default 5433) with Debian's pg_ctl as the
#           postgres OS user, and waits until it streams. Prints the URL to export as
#           CORTEX_REPLICA_URL. Idempotent: a standby already running is left as it is.
#   halt    stops it, keeping its data directory (start starts it again).
#   stop    stops it and deletes its data directory.
#
# The primary needs wal_level=replica (PostgreSQL's default) and a pg_hba.conf line letting
# 127.0.0.1 connect for replication; when that line is missing it is appended and the
# configuration reloaded (pg_reload_conf(): the primary is never restarted).
set -euo pipefail
cd "$(dirname "$0")/.."

PRIMARY_HOST=${PRIMARY_HOST:-127.0.0.1}
PRIMARY_PORT=${PRIMARY_PORT:-5432}
PRIMARY_USER=${PRIMARY_USER:-postgres}
STANDBY_PORT=${STANDBY_PORT:-5433}
STANDBY_DIR=${STANDBY_DIR:-$PWD/.ci-standby}
PG_VERSION=${PG_VERSION:-$(ls /usr/lib/postgresql | sort -n | tail -1)}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/$PG_VERSION/bin}

as_postgres() {
    if [ "$(id -un)" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi
}
psql_primary() {
    psql -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -U "$PRIMARY_USER" -d postgres -Atqc "$1"
}
running() {
    [ -f "$STANDBY_DIR/data/postmaster.pid" ] && as_postgres "$PG_BIN/pg_ctl" -D "$STANDBY_DIR/data" status >/dev/null 2>&1
}

allow_replication() {
    local level hba
    level=$(psql_primary "SHOW wal_level")
    if [ "$level" = minimal ]; then
        echo "the primary runs with wal_level=minimal; set wal_level=replica and restart it" >&2
        exit 1
    fi
    hba=$(psql_primary "SHOW hba_file")
    if ! grep -Eq "^[[:space:]]*host[[:space:]]+replication[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust" "$hba"; then
        echo "host replication all 127.0.0.1/32 trust  # cortex_sessions .ci/standby.sh" >>"$hba"
        psql_primary "SELECT pg_reload_conf()" >/dev/null
        sleep 1
    fi
}

start() {
    if running; then
        echo "standby already running on port $STANDBY_PORT ($STANDBY_DIR)"
    elif [ -f "$STANDBY_DIR/data/standby.signal" ]; then
        as_postgres "$PG_BIN/pg_ctl" -D "$STANDBY_DIR/data" -l "$STANDBY_DIR/log" -w start >/dev/null
    else
        allow_replication
        rm -rf "$STANDBY_DIR"
        mkdir -p "$STANDBY_DIR"
        chown postgres: "$STANDBY_DIR" 2>/dev/null || true
        as_postgres "$PG_BIN/pg_basebackup" -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -U "$PRIMARY_USER" \
            -D "$STANDBY_DIR/data" -R -X stream -c fast
        # Debian keeps a cluster's configuration in /etc, so the copy has none: its own port and
        # socket directory, trust for local connections, hot standby; recovery conflicts cancel
        # a standby query after 1 s (the replica tests provoke one), and the tests pause replay.
        as_postgres tee "$STANDBY_DIR/data/postgresql.conf" >/dev/null <<CONF
port = $STANDBY_PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$STANDBY_DIR'
hba_file = '$STANDBY_DIR/data/pg_hba.conf'
ident_file = '$STANDBY_DIR/data/pg_ident.conf'
hot_standby = on
hot_standby_feedback = off
max_standby_streaming_delay = 1s
max_connections = 100
shared_buffers = 32MB
logging_collector = off
CONF
        printf 'local all all trust\nhost all all 127.0.0.1/32 trust\n' |
            as_postgres tee "$STANDBY_DIR/data/pg_hba.conf" >/dev/null
        as_postgres touch "$STANDBY_DIR/data/pg_ident.conf"
        as_postgres "$PG_BIN/pg_ctl" -D "$STANDBY_DIR/data" -l "$STANDBY_DIR/log" -w start >/dev/null
    fi
    for _ in $(seq 1 60); do
        if [ "$(psql_primary "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")" -gt 0 ] &&
            [ "$(psql -h 127.0.0.1 -p "$STANDBY_PORT" -U "$PRIMARY_USER" -d postgres -Atqc "SELECT pg_is_in_recovery()")" = t ]; then
            echo "standby streaming on port $STANDBY_PORT"
            echo "export CORTEX_REPLICA_URL=postgres://$PRIMARY_USER@127.0.0.1:$STANDBY_PORT/postgres"
            return 0
        fi
        sleep 1
    done
    echo "the standby did not start streaming; see $STANDBY_DIR/log" >&2
    exit 1
}

stop() {
    if running; then
        as_postgres "$PG_BIN/pg_ctl" -D "$STANDBY_DIR/data" -m fast -w stop >/dev/null
    fi
    rm -rf "$STANDBY_DIR"
    echo "standby stopped"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
halt) if running; then as_postgres "$PG_BIN/pg_ctl" -D "$STANDBY_DIR/data" -m fast -w stop >/dev/null; fi ;;
status) if running; then echo running; else echo stopped; exit 3; fi ;;
*)
    echo "usage: $0 start|halt|stop|status" >&2
    exit 2
    ;;
esac
