"""The harness's fault hooks (its ``bench_harness/hooks.py``), done natively against a local PostgreSQL.

Each phase type has an ``enter`` and an ``exit``; what a fault starts in the
background (a held transaction, readers, a killer, a server outage) runs in
a thread that ``exit`` stops and joins. The harness's semantics, its
defaults included, are described in ``PHASES.md`` §2; where this differs
it says so in a comment.

The driver's own sessions carry the application name :data:`DRIVER_APP`,
so that ``pg-backend-kill`` spares them (the harness spares only the
killer's own session and hits its own metrics daemon's).

Threads: each fault's thread owns its connections; what it reports back
(counts, an error) goes into its ``notes`` dict, read after it is joined.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

DRIVER_APP = "owf-chaos-driver"
BUSY_FILE = Path("/tmp/owf-ci-busy")  # another user's timed runs on this machine's PostgreSQL


def wait_while_busy(why: str) -> None:
    """Wait while the machine's shared-use flag file exists (another user's timed runs need the server)."""
    announced = False
    while BUSY_FILE.exists():
        if not announced:
            print(f"[chaos] {BUSY_FILE} exists: waiting before {why}", file=sys.stderr, flush=True)
            announced = True
        time.sleep(15)


def wait_while_shared(admin_url: str, database: str, why: str, limit_s: float = 600.0) -> str:
    """Wait (at most ``limit_s``) while other databases than ours have client sessions; what was left, if any.

    For the faults that reach beyond our database (a server outage, a full
    connection table): someone else's tests on the server would fail.
    """
    started, announced = time.monotonic(), False
    while True:
        wait_while_busy(why)
        with connect(admin_url, autocommit=True) as conn:
            others = sessions_elsewhere(conn, database)
        if not others or time.monotonic() - started > limit_s:
            return others
        if not announced:
            print(f"[chaos] other databases in use ({others}): waiting before {why}", file=sys.stderr, flush=True)
            announced = True
        time.sleep(15)


def sessions_elsewhere(conn: psycopg.Connection[Any], database: str) -> str:
    """Client sessions on databases other than ``database`` and ``postgres``: a server someone else uses now."""
    rows = conn.execute(
        "SELECT datname, count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
        " AND datname IS NOT NULL AND datname NOT IN (%s, 'postgres') GROUP BY datname",
        [database],
    ).fetchall()
    return ", ".join(f"{name} {count}" for name, count in rows)


def connect(url: str, **kwargs: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(url, application_name=DRIVER_APP, connect_timeout=5, **kwargs)


# -- replicas ------------------------------------------------------------------


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants, from /proc (our adapter's workers run in sessions of their own)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parents[int(name)] = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, grew = {root}, True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in tree}
        grew = not found <= tree
        tree |= found
    return sorted(tree)


@dataclass
class Replica:
    """One adapter process (``BENCH_INSTANCE_ID``), with its own producer, as the harness's ReplicaPool runs it."""

    instance: int
    command: list[str]
    cwd: Path
    env: dict[str, str]
    log: Path
    on_record: Callable[[int, dict[str, Any]], None]
    proc: subprocess.Popen[bytes] | None = None
    running: bool = False  # False once killed or stopped on purpose: an exit then is no crash
    stdin_dropped: int = 0  # pacing lines the adapter did not read (its pipe was full)
    starts: int = 0

    def start(self) -> None:
        env = dict(self.env, BENCH_INSTANCE_ID=str(self.instance))
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.command,
                cwd=self.cwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        assert self.proc.stdin is not None
        os.set_blocking(self.proc.stdin.fileno(), False)  # the pacer must never block on an adapter
        described = threading.Event()
        threading.Thread(target=self._read, args=(self.proc, described), daemon=True).start()
        self.starts += 1
        if not described.wait(60):  # the harness's limit for the descriptor line
            self.kill()
            raise RuntimeError(f"replica {self.instance}: no descriptor within 60 s (see {self.log})")
        self.running = True

    def _read(self, proc: subprocess.Popen[bytes], described: threading.Event) -> None:
        import json

        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("kind") == "descriptor":
                described.set()
            elif record.get("kind") == "adapter":
                self.on_record(self.instance, record)

    def pace(self, line: bytes) -> None:
        """One of the harness pacer's ``ENQUEUE n`` lines; dropped (and counted) when the pipe is full."""
        if not self.running or self.proc is None or self.proc.stdin is None:
            return
        try:
            os.write(self.proc.stdin.fileno(), line)
        except BlockingIOError:
            self.stdin_dropped += 1
        except (BrokenPipeError, OSError, ValueError):
            pass

    def crashed(self) -> int | None:
        """The exit code of a replica that exited while it should be running, else None."""
        if self.running and self.proc is not None and (code := self.proc.poll()) is not None:
            return code
        return None

    def kill(self) -> None:
        """SIGKILL the replica: the adapter, its process group and its descendants (a container's death)."""
        self.running = False
        if self.proc is None:
            return
        for pid in process_tree(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self._close_stdin()

    def terminate(self) -> None:
        """The harness's stop: close stdin, SIGTERM (the adapter must drain and exit 0)."""
        self.running = False
        if self.proc is None or self.proc.poll() is not None:
            return
        self._close_stdin()
        self.proc.send_signal(signal.SIGTERM)

    def _close_stdin(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass


# -- the faults ------------------------------------------------------------------


@dataclass
class FaultContext:
    """What a fault needs: the server, the system's database, its replicas, the producer's control file."""

    admin_url: str  # the server's ``postgres`` database
    db_url: str
    db_name: str
    event_tables: list[str]
    replicas: list[Replica]
    control_file: Path
    base_rate: float
    high_load_multiplier: float = 1.5
    own_server: bool = False
    cluster: tuple[str, str] = ("15", "main")
    idle_conns: int | None = None  # pool-exhaustion: None = the harness's share of max_connections
    outage_s: float = 30.0  # postgres-restart: how long the server stays down
    state: dict[str, Any] = field(default_factory=dict)  # a fault's live parts, from enter to exit
    notes: list[str] = field(default_factory=list)  # what the faults did, for the report


def _thread(name: str, target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def enter_idle_in_tx(ctx: FaultContext, params: dict[str, str]) -> None:
    stop, ready = threading.Event(), threading.Event()
    held: dict[str, Any] = {}

    def hold() -> None:
        try:
            with connect(ctx.db_url, autocommit=False) as conn:
                held["xid"] = conn.execute("SELECT txid_current()").fetchone()[0]  # type: ignore[index]
                ready.set()
                stop.wait()
        except Exception as exc:
            held["error"] = exc
            ready.set()

    thread = _thread("idle-in-tx", hold)
    if not ready.wait(5) or "error" in held:
        stop.set()
        raise RuntimeError(f"idle-in-tx: no transaction open within 5 s ({held.get('error')})")
    ctx.state["idle-in-tx"] = (stop, thread)
    ctx.notes.append(f"idle-in-tx: one session held xid {held['xid']}")


def exit_idle_in_tx(ctx: FaultContext) -> None:
    stop, thread = ctx.state.pop("idle-in-tx")
    stop.set()
    thread.join(5)


def enter_active_readers(ctx: FaultContext, params: dict[str, str]) -> None:
    table = ctx.event_tables[0] if ctx.event_tables else "pg_stat_user_tables"
    sql = f"SELECT count(*) FROM {table}"
    count = int(params.get("count", os.environ.get("ACTIVE_READER_COUNT", "4")))
    stop = threading.Event()
    scans = [0] * count

    def read(i: int) -> None:
        with connect(ctx.db_url, autocommit=False) as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            while not stop.is_set():  # one transaction for the whole phase: its snapshot is held throughout
                try:
                    conn.execute(sql).fetchall()
                    scans[i] += 1
                except psycopg.Error:
                    pass
                stop.wait(0.1)

    threads = [_thread(f"reader-{i}", lambda i=i: read(i)) for i in range(count)]
    ctx.state["active-readers"] = (stop, threads, scans, sql)


def exit_active_readers(ctx: FaultContext) -> None:
    stop, threads, scans, sql = ctx.state.pop("active-readers")
    stop.set()
    for thread in threads:
        thread.join(5)
    ctx.notes.append(f"active-readers: {len(threads)} REPEATABLE READ readers ran {sum(scans)} scans of {sql!r}")


def enter_high_load(ctx: FaultContext, params: dict[str, str]) -> None:
    ctx.control_file.write_text(str(ctx.base_rate * ctx.high_load_multiplier))


def exit_high_load(ctx: FaultContext) -> None:
    ctx.control_file.write_text(str(ctx.base_rate))


def enter_pg_backend_kill(ctx: FaultContext, params: dict[str, str]) -> None:
    period = 1.0 / max(0.01, float(params.get("rate", "2")))
    stop = threading.Event()
    counts = {"kills": 0, "errors": 0}
    sql = (
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
        " AND state IN ('active', 'idle in transaction') AND application_name <> %s"
    )

    def kill() -> None:
        # Unlike the harness's loop, which stops for the rest of the phase at its first error, this one reconnects.
        while not stop.is_set():
            try:
                with connect(ctx.admin_url, autocommit=True) as conn:
                    while not stop.is_set():
                        counts["kills"] += len(conn.execute(sql, [ctx.db_name, DRIVER_APP]).fetchall())
                        stop.wait(period)
            except psycopg.Error:
                counts["errors"] += 1
                stop.wait(period)

    ctx.state["pg-backend-kill"] = (stop, _thread("pg-backend-kill", kill), counts)


def exit_pg_backend_kill(ctx: FaultContext) -> None:
    stop, thread, counts = ctx.state.pop("pg-backend-kill")
    stop.set()
    thread.join(5)
    ctx.notes.append(f"pg-backend-kill: {counts['kills']} backends terminated ({counts['errors']} killer errors)")


def enter_pool_exhaustion(ctx: FaultContext, params: dict[str, str]) -> None:
    with connect(ctx.admin_url, autocommit=True) as conn:
        limit = int(conn.execute("SHOW max_connections").fetchone()[0])  # type: ignore[index]
        before = int(
            conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").fetchone()[0]
        )  # type: ignore[index]
    # The harness holds 300 idle sessions on a server of max_connections = 400: three quarters of it.
    wanted = ctx.idle_conns if ctx.idle_conns is not None else int(params.get("idle_conns", round(limit * 0.75)))
    stop, ready = threading.Event(), threading.Event()
    held: dict[str, Any] = {"opened": 0, "error": ""}

    def hold() -> None:
        conns = []
        try:
            for _ in range(wanted):
                try:
                    conns.append(connect(ctx.db_url, autocommit=True))
                except psycopg.Error as exc:  # the harness too stops at the first refusal, and holds what it has
                    held["error"] = str(exc).strip().splitlines()[0]
                    break
            held["opened"] = len(conns)
            ready.set()
            while not stop.wait(1.0):
                if BUSY_FILE.exists():  # another user's timed run needs connections: give them back now
                    held["cut"] = True
                    break
        finally:
            for conn in conns:
                conn.close()

    thread = _thread("pool-exhaustion", hold)
    ready.wait(10)
    ctx.state["pool-exhaustion"] = (stop, thread, held, wanted, limit, before)


def exit_pool_exhaustion(ctx: FaultContext) -> None:
    stop, thread, held, wanted, limit, before = ctx.state.pop("pool-exhaustion")
    stop.set()
    thread.join(10)
    ctx.notes.append(
        f"pool-exhaustion: {held['opened']} of {wanted} idle sessions held (max_connections {limit},"
        f" {before} client sessions before)"
        + (f"; refused after that: {held['error']}" if held["error"] else "")
        + ("; released early: the machine's busy flag appeared" if held.get("cut") else "")
    )


def enter_kill_worker(ctx: FaultContext, params: dict[str, str]) -> None:
    ctx.replicas[int(params.get("instance", "0"))].kill()


def enter_start_worker(ctx: FaultContext, params: dict[str, str]) -> None:
    ctx.replicas[int(params.get("instance", "0"))].start()


def enter_repeated_kill(ctx: FaultContext, params: dict[str, str]) -> None:
    replica = ctx.replicas[int(params.get("instance", "0"))]
    period = float(params.get("period", "20s").rstrip("s"))
    stop = threading.Event()
    counts = {"cycles": 0}
    errors: list[str] = []

    def cycle() -> None:
        while not stop.wait(period):
            replica.kill()
            if stop.wait(1.0):
                return
            try:
                replica.start()
                counts["cycles"] += 1
            except Exception as exc:
                errors.append(str(exc))

    ctx.state["repeated-kill"] = (stop, _thread("repeated-kill", cycle), replica, counts, errors)


def exit_repeated_kill(ctx: FaultContext) -> None:
    stop, thread, replica, counts, errors = ctx.state.pop("repeated-kill")
    stop.set()
    thread.join(70)
    if not replica.running:  # the recovery phase runs with every replica, as the harness's does
        replica.start()
    ctx.notes.append(f"repeated-kill: {counts['cycles']} SIGKILL + relaunch cycles" + (f"; {errors}" if errors else ""))


# -- postgres-restart: only on a server that is the script's own ---------------------------------


def pg_ctlcluster(ctx: FaultContext, action: str) -> None:
    version, name = ctx.cluster
    command = ["pg_ctlcluster", version, name, action] + (["-m", "fast"] if action == "stop" else [])
    subprocess.run(command, check=True, timeout=120)


def wait_for_server(url: str, timeout_s: float = 90.0) -> float:
    """Seconds until the server answers ``SELECT 1``; raises after ``timeout_s``."""
    started = time.monotonic()
    while True:
        try:
            with connect(url, autocommit=True) as conn:
                conn.execute("SELECT 1")
            return time.monotonic() - started
        except psycopg.Error:
            if time.monotonic() - started > timeout_s:
                raise
            time.sleep(0.5)


def ensure_server_started(ctx: FaultContext) -> None:
    """Start the server if it is down (the restart's ``finally``, and the driver's own at its end)."""
    try:
        wait_for_server(ctx.admin_url, timeout_s=1.0)
    except psycopg.Error:
        pg_ctlcluster(ctx, "start")
        wait_for_server(ctx.admin_url)


def enter_postgres_restart(ctx: FaultContext, params: dict[str, str]) -> None:
    if not ctx.own_server:
        raise RuntimeError("postgres-restart stops the server: run with --own-server only where it is this script's")
    stop = threading.Event()
    result: dict[str, Any] = {}

    def outage() -> None:
        stopped = False
        try:
            if BUSY_FILE.exists():  # checked immediately before the stop: never while another user's run needs it
                result["skipped"] = "the machine's busy flag appeared"
                return
            with connect(ctx.admin_url, autocommit=True) as conn:
                others = sessions_elsewhere(conn, ctx.db_name)
            if others:
                result["skipped"] = f"other databases had sessions ({others}): someone else is using the server"
                return
            pg_ctlcluster(ctx, "stop")
            stopped = True
            result["down_at"] = time.monotonic()
            stop.wait(ctx.outage_s)
        except Exception as exc:
            result["error"] = exc
        finally:
            if stopped:
                try:
                    pg_ctlcluster(ctx, "start")
                    result["ready_after_s"] = wait_for_server(ctx.admin_url)
                    result["down_s"] = time.monotonic() - result["down_at"]
                except Exception as exc:
                    result["error"] = exc

    ctx.state["postgres-restart"] = (stop, _thread("postgres-restart", outage), result)


def exit_postgres_restart(ctx: FaultContext) -> None:
    _, thread, result = ctx.state.pop("postgres-restart")
    # The stop event is left unset: the outage lasts its 30 s even if the phase is shorter; the start follows in its finally.
    thread.join(180)
    ensure_server_started(ctx)
    if "skipped" in result:
        ctx.notes.append(f"postgres-restart: NOT done ({result['skipped']}): the cell is void")
        raise RuntimeError("postgres-restart skipped")
    if "error" in result:
        raise RuntimeError(f"postgres-restart failed: {result['error']}")
    ctx.notes.append(
        f"postgres-restart: the server was down {result['down_s']:.1f} s (pg_ctlcluster stop -m fast/start)"
    )


HOOKS: dict[
    str, tuple[Callable[[FaultContext, dict[str, str]], None] | None, Callable[[FaultContext], None] | None]
] = {
    "warmup": (None, None),
    "clean": (None, None),
    "recovery": (None, None),
    "idle-in-tx": (enter_idle_in_tx, exit_idle_in_tx),
    "active-readers": (enter_active_readers, exit_active_readers),
    "high-load": (enter_high_load, exit_high_load),
    "pg-backend-kill": (enter_pg_backend_kill, exit_pg_backend_kill),
    "pool-exhaustion": (enter_pool_exhaustion, exit_pool_exhaustion),
    "kill-worker": (enter_kill_worker, None),
    "start-worker": (enter_start_worker, None),
    "repeated-kill": (enter_repeated_kill, exit_repeated_kill),
    "postgres-restart": (enter_postgres_restart, exit_postgres_restart),
}
