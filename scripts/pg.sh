#!/usr/bin/env bash
# A throw-away PostgreSQL server for tests.
#
#   eval "$(scripts/pg.sh start)"   # prints export lines: FLASHGEN_TEST_PG_URL, FLASHGEN_PG_DIR
#   scripts/pg.sh stop [DIR]        # stops the server in DIR (default $FLASHGEN_PG_DIR), removes DIR
#
# initdb into a fresh temporary directory, listen only on a unix socket inside it (no port to
# collide with another run), trust auth for the local socket, create database `flashgen_test`.
# PostgreSQL refuses to run as root, so as root every server command runs as the `postgres`
# user through runuser. PG_BIN overrides where the binaries are (default: PostgreSQL 15).
set -euo pipefail

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PG_USER=${PG_USER:-postgres}

as_pg() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u "$PG_USER" -- "$@"
    else
        "$@"
    fi
}

start() {
    if [ ! -x "$PG_BIN/initdb" ]; then
        echo "pg.sh: no PostgreSQL binaries in $PG_BIN" >&2
        return 3
    fi
    local dir
    dir=$(mktemp -d "${TMPDIR:-/tmp}/fgpg.XXXXXX")
    chmod 755 "$dir"
    if [ "$(id -u)" = 0 ]; then
        chown "$PG_USER" "$dir"
    fi
    local role
    role=$([ "$(id -u)" = 0 ] && echo "$PG_USER" || id -un)
    if ! as_pg "$PG_BIN/initdb" -D "$dir/data" -U "$role" --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1; then
        cat "$dir/initdb.log" >&2
        rm -rf "$dir"
        return 1
    fi
    if ! as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-c listen_addresses='' -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
        start >/dev/null; then
        cat "$dir/server.log" >&2
        rm -rf "$dir"
        return 1
    fi
    if ! as_pg "$PG_BIN/createdb" -h "$dir" -U "$role" flashgen_test; then
        stop "$dir"  # the server is up: do not leave it running
        return 1
    fi
    echo "export FLASHGEN_PG_DIR=$dir"
    echo "export FLASHGEN_TEST_PG_URL=postgresql+psycopg2://$role@/flashgen_test?host=$dir"
}

stop() {
    local dir=${1:-${FLASHGEN_PG_DIR:-}}
    if [ -z "$dir" ] || [ ! -d "$dir/data" ]; then
        echo "pg.sh stop: no server directory given (arg or FLASHGEN_PG_DIR)" >&2
        return 1
    fi
    as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
}

case "${1:-}" in
    start) start ;;
    stop) shift; stop "$@" ;;
    *) echo "usage: $0 start|stop [DIR]" >&2; exit 2 ;;
esac
