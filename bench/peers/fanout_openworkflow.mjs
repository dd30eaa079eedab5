// The fan-out benchmark (bench/phases/fanout.py) on OpenWorkflow, for the side-by-side in
// bench/compare.sh. Our own benchmark code only: OpenWorkflow itself is installed under /tmp
// by ../shared/bench-peers/install.sh (/tmp/peers/ow: openworkflow@0.10.1 + postgres@3.4.9)
// and imported from there by absolute path, as ../shared/bench-peers/openworkflow/bench.mjs does.
//
//   node bench/peers/fanout_openworkflow.mjs [main] --n 300 [--conc 20] [--timeout 170]
//   node bench/peers/fanout_openworkflow.mjs worker --conc 20        (spawned by main)
//
// Environment: OW_DIR (/tmp/peers/ow), OW_DB_URL (postgresql://postgres@127.0.0.1:5432/bench_ow_fanout;
// the database is created if missing, its tables emptied first).
//
// Same shape as ours: ONE worker process (concurrency --conc) is started and left idle for a
// second, then this process starts one parent run whose code starts N child workflows at once
// (Promise.all over step.runWorkflow, each child one step returning its index and its own run
// id) and returns their N results; this process waits for it with the native handle.result().
//   wall_s          = parent .run() called -> handle.result() returned (OpenWorkflow's result()
//                     polls every 1,000 ms: up to a second of this is the caller's polling)
//   server_wall_s   = the same start -> the parent's finished_at
//   children_done_s = the same start -> the last child's finished_at
// Checked: N results, indexes 0..N-1 in order, N distinct child run ids, each a completed child
// run. Prints `ow.fanout.*` figure lines and one `RESULT peer=openworkflow mode=fanout ...` line
// with the fields of ours (bench/report.py fanout_line).
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { performance } from "node:perf_hooks";
import { fileURLToPath, pathToFileURL } from "node:url";

const OW_DIR = process.env.OW_DIR || "/tmp/peers/ow";
const DB_URL = process.env.OW_DB_URL || "postgresql://postgres@127.0.0.1:5432/bench_ow_fanout";
const req = createRequire(OW_DIR + "/package.json");
const dist = OW_DIR + "/node_modules/openworkflow/dist";
const { OpenWorkflow } = await import(pathToFileURL(dist + "/index.js").href);
const { BackendPostgres } = await import(pathToFileURL(dist + "/postgres.js").href);
const postgresMod = await import(pathToFileURL(req.resolve("postgres")).href);
const postgres = postgresMod.default ?? postgresMod;

function arg(name, def) {
  const i = process.argv.indexOf("--" + name);
  return i >= 0 ? process.argv[i + 1] : def;
}
const role = process.argv[2] && !process.argv[2].startsWith("--") ? process.argv[2] : "main";
const N = parseInt(arg("n", "300"), 10);
const CONC = parseInt(arg("conc", "20"), 10);
const TIMEOUT_S = parseFloat(arg("timeout", "170"));
const PARENT = "bench-fanout";
const CHILD = "bench-fanout-child";

const nowMs = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const HZ = 100; // USER_HZ

function cpuSample() {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1, 9).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return [total - f[3] - f[4], total];
}
function procCpuS(pid) {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(")").pop().trim().split(/\s+/);
    return (Number(fields[11]) + Number(fields[12])) / HZ;
  } catch {
    return NaN;
  }
}

function defineAll(ow) {
  const child = ow.defineWorkflow({ name: CHILD }, async ({ input, step, run }) => {
    return await step.run({ name: "work" }, async () => ({ i: input.i, run: run.id }));
  });
  const parent = ow.defineWorkflow({ name: PARENT }, async ({ input, step }) => {
    return await Promise.all(
      Array.from({ length: input.count }, (_, i) =>
        step.runWorkflow(child.workflow.spec, { i }, { name: `child-${i}` }),
      ),
    );
  });
  return { child, parent };
}

async function ensureDatabase() {
  const url = new URL(DB_URL);
  const name = decodeURIComponent(url.pathname.slice(1));
  url.pathname = "/postgres";
  const admin = postgres(url.toString(), { max: 1, onnotice: () => {} });
  try {
    const rows = await admin`select 1 from pg_database where datname = ${name}`;
    if (!rows.length) {
      await admin.unsafe(`create database "${name.replace(/"/g, '""')}"`);
      console.log(`# ow: created database ${name}`);
    }
  } finally {
    await admin.end();
  }
}

async function workerMain() {
  const backend = await BackendPostgres.connect(DB_URL);
  const ow = new OpenWorkflow({ backend });
  defineAll(ow);
  const worker = ow.newWorker({ concurrency: CONC });
  await worker.start();
  console.log("READY");
  const stop = async () => {
    try {
      await worker.stop();
      await backend.stop();
    } finally {
      process.exit(0);
    }
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

function spawnWorker() {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), "worker", "--conc", String(CONC)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const ready = new Promise((resolve, reject) => {
    child.stdout.on("data", (d) => {
      const s = d.toString();
      if (s.includes("READY")) resolve();
      else process.stderr.write("[worker] " + s);
    });
    child.on("exit", (c) => reject(new Error("worker exited " + c)));
  });
  return { child, ready };
}

function check(out, childRows) {
  if (!Array.isArray(out) || out.length !== N) {
    return [`expected a list of ${N} results, got ${Array.isArray(out) ? out.length : typeof out}`];
  }
  const problems = [];
  if (!out.every((r, i) => r && r.i === i)) problems.push("results are not the children's indexes 0..N-1 in order");
  const ids = out.map((r) => r && r.run);
  const distinct = new Set(ids).size;
  if (distinct !== N) problems.push(`${distinct} distinct child run ids, expected ${N}`);
  const bad = ids.filter((id) => childRows.get(id) !== "completed");
  if (bad.length) problems.push(`${bad.length} result run ids are not completed ${CHILD} runs (e.g. ${bad[0]})`);
  if (childRows.size !== N) problems.push(`${childRows.size} ${CHILD} runs in the database, expected ${N}`);
  return problems;
}

async function main() {
  await ensureDatabase();
  const backend = await BackendPostgres.connect(DB_URL); // runs migrations
  const sql = postgres(DB_URL, { max: 2, onnotice: () => {} });
  await sql.unsafe(
    `TRUNCATE openworkflow.workflow_runs, openworkflow.step_attempts, openworkflow.workflow_signals CASCADE`,
  );
  const ow = new OpenWorkflow({ backend });
  const { parent } = defineAll(ow);
  const load1 = Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]);

  const w = spawnWorker();
  await w.ready;
  await sleep(1000); // started and left idle first
  const c0 = cpuSample();
  const w0 = procCpuS(w.child.pid);
  const [m0] = await sql`select txid_snapshot_xmax(txid_current_snapshot())::text as x`;
  let out, error;
  const t0 = nowMs();
  let t1 = NaN;
  try {
    const h = await parent.run({ count: N });
    out = await h.result({ timeoutMs: TIMEOUT_S * 1000 });
    t1 = nowMs();
  } catch (e) {
    error = e;
  }
  const c1 = cpuSample();
  const w1 = procCpuS(w.child.pid);
  const [m1] = await sql`select txid_snapshot_xmax(txid_current_snapshot())::text as x`;
  w.child.kill("SIGTERM");
  await new Promise((r) => w.child.on("exit", r));

  const [p] = await sql`select extract(epoch from max(finished_at))*1000 as fin from openworkflow.workflow_runs
                        where workflow_name = ${PARENT}`;
  const rows = await sql`select id, status, extract(epoch from finished_at)*1000 as fin
                         from openworkflow.workflow_runs where workflow_name = ${CHILD}`;
  await sql.end();
  await backend.stop();

  const childRows = new Map(rows.map((r) => [r.id, r.status]));
  const lastChild = Math.max(...rows.map((r) => Number(r.fin ?? NaN)).filter((x) => !Number.isNaN(x)));
  const problems = error ? [`parent failed or timed out: ${error}`] : check(out, childRows);
  for (const msg of problems) console.log(`# ow: fanout: ${msg}`);
  const wall = (t1 - t0) / 1000;
  const busy = c1[0] - c0[0];
  const total = c1[1] - c0[1];
  const r = {
    wall,
    serverWall: (Number(p.fin) - t0) / 1000,
    childrenDone: (lastChild - t0) / 1000,
    perS: N / wall,
    distinct: Array.isArray(out) ? new Set(out.map((x) => x && x.run)).size : 0,
    util: total ? (100 * busy) / total : NaN,
    cpuMs: (busy * (1000 / HZ)) / N,
    workerPct: (100 * (w1 - w0)) / wall,
    wtx: (Number(m1.x) - Number(m0.x)) / N,
  };
  const f = (x, d = 1) => (x === null || x === undefined || !Number.isFinite(Number(x)) ? "nan" : Number(x).toFixed(d));
  const emit = (name, v, unit, d = 1) => console.log(`ow.fanout.${name} ${f(v, d)} ${unit}`);
  emit("children", N, `children (1 step each), parent: Promise.all of ${N} step.runWorkflow`, 0);
  emit("wall_s", r.wall, "s (parent .run() -> handle.result() returned; result() polls every 1 s)", 3);
  emit("children_per_s", r.perS, "children/s (N / wall_s)");
  emit("server_wall_s", r.serverWall, "s (parent .run() -> parent finished_at)", 3);
  emit("children_done_s", r.childrenDone, "s (parent .run() -> last child finished_at)", 3);
  emit("distinct_children", r.distinct, "distinct child run ids in the result", 0);
  emit("worker_cpu_pct", r.workerPct, "%(1 core=100)", 0);
  emit("machine_cpu_ms_per_child", r.cpuMs, "ms/child", 2);
  emit("write_txn_per_child", r.wtx, "write-txn/child (xid delta, cluster-wide)", 2);
  const parts = [
    "peer=openworkflow",
    "mode=fanout",
    `n=${N}`,
    `conc=${CONC}`,
    "db=postgres",
    `wall_s=${f(r.wall, 3)}`,
    `children_per_s=${f(r.perS)}`,
    `server_wall_s=${f(r.serverWall, 3)}`,
    `children_done_s=${f(r.childrenDone, 3)}`,
    `distinct_children=${r.distinct}`,
    `cpu_util_pct=${f(r.util, 0)}`,
    `cpu_ms_per_child=${f(r.cpuMs, 2)}`,
    `worker_cpu_pct=${f(r.workerPct, 0)}`,
    `write_txn_per_child=${f(r.wtx, 2)}`,
    `load1=${f(load1, 2)}`,
    "lat_n=0",
    `ok=${problems.length === 0}`,
    `ts=${new Date().toISOString().replace(/\.\d+Z$/, "Z")}`,
  ];
  console.log("RESULT " + parts.join(" "));
  if (problems.length) process.exitCode = 1;
}

if (role === "worker") await workerMain();
else
  await main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
