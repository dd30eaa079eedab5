#!/usr/bin/env bash
# Side by side: ours and the peers (../shared/bench-peers) alternately on the same local
# PostgreSQL -- round 1: ours, peers; round 2: ours, peers; ... -- then the median ratio
# ours / peer per figure (bench/compare.py).
#
#   bench/compare.sh                          # 3 rounds, all peers (~40-50 min on 2 cores)
#   ROUNDS=1 PEERS="ow dbos" bench/compare.sh
#   FANOUT_ONLY=1 PEERS=ow bench/compare.sh   # only the 300-child fan-out, ours vs OpenWorkflow (~1 min)
#
# Variables: ROUNDS (3), PEERS ("ow dbos celery proc"; run_all.sh's ONLY, add "limit" for
# pgbench), N (2000 runs per throughput config), LAT (50 latency samples), GAP (1000 ms max
# idle gap), TMO (240 s per peer config), PY (our venv python), PEERS_DIR
# (../shared/bench-peers), RUN_ID, OUT_DIR (/tmp/owf-compare/$RUN_ID), SKIP_INSTALL=1,
# PEER_SETUP=1 (run the peers' setup.sh -- it RESTARTS PostgreSQL, see below),
# FANOUT (300 children in the fan-out; 0: no fan-out), FANOUT_ONLY=1 (the fan-out only: ours'
# fanout phase and, for the peer ow, bench/peers/fanout_openworkflow.mjs; the other peers have
# no fan-out and are skipped), OW_FANOUT_DB_URL (postgresql://postgres@127.0.0.1:5432/bench_ow_fanout,
# OpenWorkflow's fan-out database, created by the script if missing).
#
# The fan-out: bench-peers has no fan-out benchmark, so OpenWorkflow's is our own script,
# bench/peers/fanout_openworkflow.mjs (it imports OpenWorkflow from /tmp/peers/ow); it runs right
# after OpenWorkflow's run_all.sh configs in each round and is tagged cfg=ow_fanout.
#
# Services: the peers' setup.sh rewrites postgresql.conf (max_connections=300) and pg_hba.conf
# and restarts PostgreSQL every time. Other people use this server, so this script does not
# call it unless PostgreSQL is not installed at all, or PEER_SETUP=1. Instead it does the
# parts the peers need without a restart: start PostgreSQL if it is down (config untouched),
# create the peers' databases, start Redis if it is not answering. Peers are installed by
# their install.sh into /tmp/peers only.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
PEERS_DIR=${PEERS_DIR:-$(cd "$ROOT/../shared/bench-peers" 2>/dev/null && pwd)}
ROUNDS=${ROUNDS:-3}
PEERS=${PEERS:-"ow dbos celery proc"}
N=${N:-2000}
LAT=${LAT:-50}
GAP=${GAP:-1000}
TMO=${TMO:-240}
FANOUT=${FANOUT:-300}
FANOUT_ONLY=${FANOUT_ONLY:-0}
PY=${PY:-$ROOT/.venv/bin/python}
RUN_ID=${RUN_ID:-cmp$(date -u +%Y%m%dT%H%M%SZ)}
OUT=${OUT_DIR:-/tmp/owf-compare/$RUN_ID}
RES=$OUT/results.txt
PGHOST=127.0.0.1
PGPORT=5432
OW_FANOUT_DB_URL=${OW_FANOUT_DB_URL:-postgresql://postgres@$PGHOST:$PGPORT/bench_ow_fanout}
if [ "$FANOUT_ONLY" = 1 ]; then
  [ "$FANOUT" -gt 0 ] || { echo "FANOUT_ONLY=1 needs FANOUT > 0" >&2; exit 1; }
  OURS_PHASES=fanout
elif [ "$FANOUT" -gt 0 ]; then
  OURS_PHASES=throughput,latency,fanout,starts,scaleout
else
  OURS_PHASES=throughput,latency,starts,scaleout
fi

mkdir -p "$OUT"
log() { echo "[$(date -u +%H:%M:%S)] $*"; }

if [ -z "$PEERS_DIR" ] || [ ! -x "$PEERS_DIR/run_all.sh" ]; then
  echo "bench-peers not found (PEERS_DIR=$PEERS_DIR)" >&2
  exit 1
fi

# ---------------------------------------------------------------- services
if [ "${PEER_SETUP:-0}" = 1 ] || ! command -v pg_lsclusters >/dev/null 2>&1 || [ -z "$(pg_lsclusters -h 2>/dev/null)" ]; then
  log "running $PEERS_DIR/setup.sh (installs/starts PostgreSQL and Redis; it RESTARTS PostgreSQL)"
  "$PEERS_DIR/setup.sh" > "$OUT/setup.log" 2>&1 || { echo "setup.sh failed, see $OUT/setup.log" >&2; exit 1; }
elif ! pg_isready -h "$PGHOST" -p "$PGPORT" -q; then
  ver=$(ls /etc/postgresql | sort -V | tail -1)
  log "PostgreSQL is down: starting cluster $ver/main (configuration untouched)"
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start
  for _ in $(seq 1 30); do pg_isready -h "$PGHOST" -p "$PGPORT" -q && break; sleep 1; done
fi
pg_isready -h "$PGHOST" -p "$PGPORT" -q || { echo "PostgreSQL is not ready on $PGHOST:$PGPORT" >&2; exit 1; }

for db in bench_ow bench_dbos bench_celery bench_proc bench_pgbench; do
  if ! psql -h "$PGHOST" -p "$PGPORT" -U postgres -tAc "select 1 from pg_database where datname='$db'" | grep -q 1; then
    log "creating database $db"
    psql -h "$PGHOST" -p "$PGPORT" -U postgres -qc "create database $db" || exit 1
  fi
done

if [[ " $PEERS " == *" celery "* ]] && ! redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; then
  log "starting redis-server on 127.0.0.1:6379 (no persistence)"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  for _ in $(seq 1 20); do redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG && break; sleep 0.5; done
fi

maxc=$(psql -h "$PGHOST" -p "$PGPORT" -U postgres -tAc "show max_connections")
used=$(psql -h "$PGHOST" -p "$PGPORT" -U postgres -tAc "select count(*) from pg_stat_activity where backend_type='client backend'")
log "PostgreSQL max_connections=$maxc, client connections in use now: $used"
if [ "$maxc" -lt 210 ]; then
  log "NOTE: max_connections=$maxc < ~210: the concurrency-100 configs cannot all get their connections:"
  log "      ours runs at a lower concurrency and says so (conc= in its RESULT line); OpenWorkflow's"
  log "      ow_c100_pool100 (a 100-connection pool) is skipped. The peers' setup.sh sets 300, but"
  log "      restarts PostgreSQL to do it, which this script does not do (PEER_SETUP=1 to allow it)."
fi

if [ "${SKIP_INSTALL:-0}" != 1 ]; then
  log "installing peers into /tmp/peers (idempotent): $PEERS_DIR/install.sh"
  "$PEERS_DIR/install.sh" > "$OUT/install.log" 2>&1 || { echo "install.sh failed, see $OUT/install.log" >&2; exit 1; }
  tail -8 "$OUT/install.log" | sed 's/^/    /'
fi

# ---------------------------------------------------------------- helpers
# Run a command in a new session; afterwards end, by pid, whatever it left behind in that
# session (e.g. a peer's worker orphaned when its benchmark failed: one such OpenWorkflow
# worker holding ~100 connections exhausted the server for everyone).
in_session() {
  local sidfile sid rc left
  sidfile=$(mktemp)
  setsid --wait bash -c 'echo $$ > "$0"; exec "$@"' "$sidfile" "$@"
  rc=$?
  sid=$(cat "$sidfile" 2>/dev/null); rm -f "$sidfile"
  [ -n "$sid" ] || return $rc
  left=$(ps -o pid=,stat= -s "$sid" 2>/dev/null | awk '$2 !~ /^Z/ {print $1}')
  if [ -n "$left" ]; then
    log "ending processes left behind in session $sid: $(echo $left)"
    for p in $left; do kill "$p" 2>/dev/null; done
    sleep 3
    for p in $(ps -o pid=,stat= -s "$sid" 2>/dev/null | awk '$2 !~ /^Z/ {print $1}'); do kill -9 "$p" 2>/dev/null; done
  fi
  return $rc
}

# OpenWorkflow's part of run_all.sh's matrix, run config by config (same tags, same results
# file), for servers whose max_connections cannot take ow_c100_pool100 (a 100-connection pool):
# that config is skipped instead of exhausting the server.
ow_direct() {
  local rid=$1 logdir=${PEERS_ROOT:-/tmp/peers}/logs/$1
  mkdir -p "$logdir"
  prun() {
    local name=$1 lf="$logdir/$1.rep1.log" rc lines
    shift
    echo ">>> [1/1] $name: $*"
    ( cd "$PEERS_DIR/openworkflow" && in_session timeout "$TMO" "$@" ) > "$lf" 2>&1
    rc=$?
    lines=$(grep '^RESULT ' "$lf")
    if [ $rc -ne 0 ] || [ -z "$lines" ]; then
      echo "FAIL name=$name rc=$rc run=$rid rep=1 log=$lf" | tee -a "$RES"
      tail -5 "$lf" | sed 's/^/    /'
    else
      echo "$lines" | sed "s/\$/ cfg=$name run=$rid rep=1/" | tee -a "$RES"
    fi
  }
  prun ow_c20 node bench.mjs main --n "$N" --conc 20
  prun ow_c100 node bench.mjs main --n "$N" --conc 100
  echo "SKIP name=ow_c100_pool100 run=$rid: needs ~100 connections, max_connections=$maxc" | tee -a "$RES"
  prun ow_c20_prefill node bench.mjs main --n "$N" --conc 20 --mode prefill
  prun ow_lat node bench.mjs main --n 0 --conc 20 --lat "$LAT" --gap "$GAP"
}

# OpenWorkflow's fan-out (our own script, bench/peers/fanout_openworkflow.mjs), tagged cfg=ow_fanout.
ow_fanout() {
  local rid=$1 lf=$OUT/ow_fanout.$1.log rc lines
  echo ">>> ow_fanout: node $HERE/peers/fanout_openworkflow.mjs --n $FANOUT --conc 20"
  OW_DB_URL=$OW_FANOUT_DB_URL in_session timeout "$TMO" node "$HERE/peers/fanout_openworkflow.mjs" \
    --n "$FANOUT" --conc 20 --timeout "$((TMO - 20))" > "$lf" 2>&1
  rc=$?
  grep '^ow\.fanout\.' "$lf"
  lines=$(grep '^RESULT ' "$lf")
  if [ $rc -ne 0 ] || [ -z "$lines" ]; then
    echo "FAIL name=ow_fanout rc=$rc run=$rid rep=1 log=$lf" | tee -a "$RES"
    tail -5 "$lf" | sed 's/^/    /'
  else
    echo "$lines" | sed "s/\$/ cfg=ow_fanout run=$rid rep=1/" | tee -a "$RES"
  fi
}

# ---------------------------------------------------------------- rounds: A B A B ...
echo "# compare.sh RUN_ID=$RUN_ID ROUNDS=$ROUNDS PEERS=\"$PEERS\" N=$N LAT=$LAT GAP=$GAP FANOUT=$FANOUT FANOUT_ONLY=$FANOUT_ONLY host=$(hostname) nproc=$(nproc) $(date -u +%FT%TZ)" >> "$RES"
for r in $(seq 1 "$ROUNDS"); do
  rid="${RUN_ID}_r$r"
  log "round $r/$ROUNDS: ours (bench/run.py --peer-protocol --only $OURS_PHASES), log $OUT/ours.r$r.log"
  ( cd "$ROOT" && in_session "$PY" "$HERE/run.py" --db postgres --peer-protocol --only "$OURS_PHASES" \
      --n "$N" --lat-n "$LAT" --gap-ms "$GAP" --fanout-n "$FANOUT" --tag "run=$rid rep=1" ) > "$OUT/ours.r$r.log" 2>&1
  rc=$?
  if ! grep -q '^RESULT ' "$OUT/ours.r$r.log"; then
    echo "FAIL name=ours rc=$rc run=$rid rep=1 log=$OUT/ours.r$r.log" | tee -a "$RES"
    tail -5 "$OUT/ours.r$r.log" | sed 's/^/    /'
  else
    grep '^pg\.fanout\.' "$OUT/ours.r$r.log"
    grep '^RESULT ' "$OUT/ours.r$r.log" | tee -a "$RES"
  fi
  # One peer at a time, each in its own session (see in_session).
  for peer in $PEERS; do
    plog="$OUT/peers.r$r.$peer.log"
    if [ "$FANOUT_ONLY" = 1 ]; then
      if [ "$peer" = ow ]; then
        log "round $r/$ROUNDS: ow fan-out, log $OUT/ow_fanout.$rid.log"
        ow_fanout "$rid" | sed 's/^\(.\{160\}\).*/\1 .../'
      else
        log "round $r/$ROUNDS: $peer has no fan-out benchmark: skipped"
      fi
      continue
    fi
    if [ "$peer" = ow ] && [ "$maxc" -lt 210 ]; then
      log "round $r/$ROUNDS: ow, config by config (max_connections=$maxc: ow_c100_pool100 skipped), log $plog"
      ow_direct "$rid" > "$plog" 2>&1
    else
      log "round $r/$ROUNDS: $peer via run_all.sh, log $plog"
      SKIP_SETUP=1 REPS=1 ONLY="$peer" N="$N" LAT="$LAT" GAP="$GAP" TMO="$TMO" RESULTS_FILE="$RES" RUN_ID="$rid" \
        in_session "$PEERS_DIR/run_all.sh" > "$plog" 2>&1
    fi
    grep -E '^(RESULT|FAIL|SKIP) ' "$plog" | sed 's/^\(.\{160\}\).*/\1 .../'
    if [ "$peer" = ow ] && [ "$FANOUT" -gt 0 ]; then
      log "round $r/$ROUNDS: ow fan-out, log $OUT/ow_fanout.$rid.log"
      ow_fanout "$rid" | sed 's/^\(.\{160\}\).*/\1 .../'
    fi
  done
done

log "summary (results: $RES)"
python3 "$HERE/compare.py" "$RES" --run-prefix "$RUN_ID" --per-round | tee "$OUT/summary.txt"
# Ours only (the peers have no such figures): starts from one thread and in bulk, one worker process vs two.
log "ours: starts and scale-out, per round"
for f in "$OUT"/ours.r*.log; do
  echo "# $(basename "$f")"
  grep -E '^pg\.(starts|scale)\.' "$f"
done | tee -a "$OUT/summary.txt"
