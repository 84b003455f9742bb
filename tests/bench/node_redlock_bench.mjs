// node_redlock_bench.mjs: the baseline for tests/bench/run.sh.
//
// The same cycle as rlbench's cycle mode, done with node-redlock
// 5.0.0-beta.2 over ioredis: N concurrent async workers, each acquiring its
// own resource with redlock.acquire([resource], ttl) and releasing it with
// lock.release(), retryCount 0, five ioredis clients on the nodes (unix
// socket paths or host:port). Prints one RESULT line per concurrency in
// rlbench's format, with the nodes' Redis work per cycle counted as rlbench
// counts it: CONFIG RESETSTAT and INFO cpu before the run's first request,
// INFO cpu and INFO commandstats once its last cycle finished and the nodes'
// call counts stopped moving, divided by every cycle the run completed
// (CONFIG and INFO left out).
//
//   node node_redlock_bench.mjs --redis /p/r1.sock,127.0.0.1:7001,... \
//        [--concurrency 1,16,64,256] [--duration 10] [--warmup 2]
//        [--ttl-ms 10000] [--auto-pipelining] [--redis-pids 1,2,3]
//        [--impl NAME] [--tag TEXT] [--drain 5]
//
// Every run is bounded: warmup + duration, then at most --drain seconds for
// in-flight cycles to finish; the process exits when all runs are done.
import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import Redis from "ioredis";
import Redlock from "redlock";

function parseArgs(argv) {
  const o = {
    redis: [],
    concurrency: [64],
    duration: 10,
    warmup: 2,
    drain: 5,
    ttl: 10000,
    autoPipelining: false,
    redisPids: [],
    impl: null,
    tag: null,
  };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const v = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case "--redis":
        o.redis.push(...v().split(",").filter(Boolean));
        break;
      case "--concurrency":
        o.concurrency = v().split(",").map(Number);
        break;
      case "--duration":
        o.duration = Number(v());
        break;
      case "--warmup":
        o.warmup = Number(v());
        break;
      case "--drain":
        o.drain = Number(v());
        break;
      case "--ttl-ms":
        o.ttl = Number(v());
        break;
      case "--auto-pipelining":
        o.autoPipelining = true;
        break;
      case "--redis-pids":
        o.redisPids = v().split(",").filter(Boolean).map(Number);
        break;
      case "--impl":
        o.impl = v();
        break;
      case "--tag":
        o.tag = v();
        break;
      default:
        throw new Error(`unknown option ${a}`);
    }
  }
  if (o.redis.length === 0) throw new Error("--redis ADDR[,ADDR...] needed");
  if (!o.impl) o.impl = o.autoPipelining ? "node-redlock-ap" : "node-redlock";
  return o;
}

const CLK_TCK = 100; // Linux USER_HZ

function procTicks(pid) {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
    return Number(f[11]) + Number(f[12]); // utime, stime (fields 14, 15)
  } catch {
    return -1;
  }
}

function ticksSum(pids) {
  if (pids.length === 0) return -1;
  let t = 0;
  for (const p of pids) {
    const v = procTicks(p);
    if (v < 0) return -1;
    t += v;
  }
  return t;
}

// Machine-wide busy and total ticks from /proc/stat.
function machineTicks() {
  try {
    const l = readFileSync("/proc/stat", "utf8").split("\n")[0];
    const v = l.trim().split(/\s+/).slice(1, 9).map(Number);
    const total = v.reduce((a, b) => a + b, 0);
    return { busy: total - v[3] - v[4], total };
  } catch {
    return null;
  }
}

function pct(sorted, p) {
  if (sorted.length === 0) return -1;
  let rank = Math.ceil((p / 100) * sorted.length);
  if (rank < 1) rank = 1;
  if (rank > sorted.length) rank = sorted.length;
  return Math.round(sorted[rank - 1]);
}

class Samples {
  constructor() {
    this.v = new Float64Array(1 << 16);
    this.n = 0;
  }
  add(x) {
    if (this.n === this.v.length) {
      if (this.n >= 1 << 25) return;
      const nv = new Float64Array(this.v.length * 2);
      nv.set(this.v);
      this.v = nv;
    }
    this.v[this.n++] = x;
  }
  sorted() {
    return this.v.slice(0, this.n).sort();
  }
}

// The Redis work of the nodes, as rlbench's stats_begin / stats_end.
function infoField(info, name) {
  const m = info.match(new RegExp(`^${name}:([0-9.]+)`, "m"));
  return m ? Number(m[1]) : -1;
}

async function nodesCpu(clients) {
  const infos = await Promise.all(clients.map((c) => c.info("cpu")));
  return infos.map(
    (i) => infoField(i, "used_cpu_sys") + infoField(i, "used_cpu_user"),
  );
}

async function statsBegin(clients) {
  await Promise.all(clients.map((c) => c.config("RESETSTAT")));
  return nodesCpu(clients);
}

// Waits until the nodes' call counts (CONFIG and INFO left out) stayed the
// same over three readings 50 ms apart, or 10 s passed; true when settled.
async function settle(clients) {
  const until = Date.now() + 10000;
  let last = -2;
  let stable = 0;
  while (Date.now() < until) {
    const infos = await Promise.all(clients.map((c) => c.info("commandstats")));
    let sum = 0;
    for (const info of infos) {
      for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
        if (!m[1].startsWith("config") && m[1] !== "info") sum += Number(m[2]);
      }
    }
    stable = sum === last ? stable + 1 : 0;
    last = sum;
    if (stable >= 2) return true;
    await sleep(50);
  }
  process.stderr.write("node_redlock_bench: the nodes were still busy\n");
  return false;
}

async function statsEnd(clients, cpu0) {
  const cpu1 = await nodesCpu(clients);
  const infos = await Promise.all(clients.map((c) => c.info("commandstats")));
  const w = { calls: 0, usec: 0, cpuS: 0, cmd: new Map() };
  cpu1.forEach((v, i) => (w.cpuS += v - cpu0[i]));
  for (const info of infos) {
    for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
      const name = m[1];
      if (name.startsWith("config") || name === "info") continue;
      w.calls += Number(m[2]);
      w.usec += Number(m[3]);
      w.cmd.set(name, (w.cmd.get(name) || 0) + Number(m[2]));
    }
  }
  return w;
}

const nowUs = () => Number(process.hrtime.bigint() / 1000n);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function errCode(e) {
  if (e && e.name === "ExecutionError") {
    // Votes against a quorum: busy when a node saw the key, else no quorum.
    const a = e.attempts && e.attempts[e.attempts.length - 1];
    return a ? "quorum" : "no_quorum";
  }
  if (e && e.name === "ResourceLockedError") return "busy";
  return "other";
}

async function runOne(o, redlock, clients, conc, runNo) {
  const st = {
    phase: "warmup",
    acq: new Samples(),
    cyc: new Samples(),
    cycles: 0,
    cyclesAll: 0,
    errs: new Map(),
  };
  const measuring = () => st.phase === "measure";
  const loading = () => st.phase === "warmup" || st.phase === "measure";
  const err = (e) => {
    if (!measuring()) return;
    const c = errCode(e);
    st.errs.set(c, (st.errs.get(c) || 0) + 1);
  };
  const worker = async (i) => {
    const resource = `bn:${process.pid}:${runNo}:${i}`;
    while (loading()) {
      const t0 = nowUs();
      let lock;
      try {
        lock = await redlock.acquire([resource], o.ttl);
      } catch (e) {
        err(e);
        continue;
      }
      const t1 = nowUs();
      if (measuring()) st.acq.add(t1 - t0);
      try {
        await lock.release();
        const t2 = nowUs();
        if (measuring()) {
          st.cyc.add(t2 - t0);
          st.cycles++;
        }
        st.cyclesAll++;
      } catch (e) {
        err(e);
      }
    }
  };
  const redisCpu0 = await statsBegin(clients);
  const workers = [];
  for (let i = 0; i < conc; i++) workers.push(worker(i));
  await sleep(o.warmup * 1000);
  st.phase = "measure";
  const t0 = nowUs();
  const cpu0 = process.cpuUsage();
  const r0 = ticksSum(o.redisPids);
  const m0 = machineTicks();
  await sleep(o.duration * 1000);
  const m1 = machineTicks();
  st.phase = "drain";
  const t1 = nowUs();
  const cpu1 = process.cpuUsage(cpu0);
  const r1 = ticksSum(o.redisPids);
  const drained = await Promise.race([
    Promise.all(workers).then(() => true),
    sleep(o.drain * 1000).then(() => false),
  ]);
  if (!drained) {
    process.stderr.write("node_redlock_bench: drain timed out\n");
  }
  const settled = await settle(clients);
  const work = await statsEnd(clients, redisCpu0);
  const secs = (t1 - t0) / 1e6;
  const acq = st.acq.sorted();
  const cyc = st.cyc.sorted();
  const benchCpu = ((cpu1.user + cpu1.system) / (t1 - t0)) * 100;
  const redisCpu =
    r0 >= 0 && r1 >= 0 ? ((r1 - r0) / CLK_TCK / secs) * 100 : -1;
  const ncpu = availableParallelism();
  const machineCpu =
    m0 && m1 && m1.total > m0.total
      ? ((m1.busy - m0.busy) / (m1.total - m0.total)) * ncpu * 100
      : -1;
  let nerr = 0;
  const errs = [];
  for (const [k, v] of st.errs) {
    errs.push(`${k}:${v}`);
    nerr += v;
  }
  const cps = st.cycles / secs;
  const perCycle = (v) => (st.cyclesAll > 0 ? v / st.cyclesAll : -1);
  const mix =
    [...work.cmd.entries()]
      .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
      .map(([k, v]) => `${k}:${perCycle(v).toFixed(2)}`)
      .join(",") || "-";
  const mean = acq.length ? acq.reduce((a, b) => a + b, 0) / acq.length : -1;
  console.log(
    `\n== cycle ${o.impl}: ${conc} worker(s), ${o.redis.length} ioredis ` +
      `client(s)${o.autoPipelining ? " (auto-pipelining)" : ""}, ` +
      `${secs.toFixed(1)} s ==`,
  );
  console.log(`  cycles/s        ${cps.toFixed(0).padStart(10)}   (${st.cycles} cycles)`);
  console.log(
    `  acquire  us     p50 ${pct(acq, 50)}  p99 ${pct(acq, 99)}  ` +
      `p99.9 ${pct(acq, 99.9)}  mean ${mean.toFixed(0)}`,
  );
  console.log(
    `  cycle    us     p50 ${pct(cyc, 50)}  p99 ${pct(cyc, 99)}  p99.9 ${pct(cyc, 99.9)}`,
  );
  console.log(`  errors          ${nerr ? errs.join(",") : "none"}`);
  console.log(
    `  redis work      ${perCycle(work.calls).toFixed(2)} commands/cycle ` +
      `(${mix}), ${perCycle(work.usec).toFixed(1)} us/cycle in commands, ` +
      `${perCycle(work.cpuS * 1e6).toFixed(1)} us/cycle redis cpu`,
  );
  console.log(
    `  cpu %           node ${benchCpu.toFixed(0)}  redis(all) ` +
      `${redisCpu.toFixed(0)}  machine ${machineCpu.toFixed(0)} of ${ncpu}00`,
  );
  console.log(
    `RESULT mode=cycle impl=${o.impl} conc=${conc} conns=${o.redis.length} ` +
      `nodes=${o.redis.length} secs=${secs.toFixed(2)} cycles=${st.cycles} ` +
      `cps=${cps.toFixed(0)} p50_us=${pct(acq, 50)} p99_us=${pct(acq, 99)} ` +
      `p999_us=${pct(acq, 99.9)} cyc_p50_us=${pct(cyc, 50)} ` +
      `cyc_p99_us=${pct(cyc, 99)} cyc_p999_us=${pct(cyc, 99.9)} ` +
      `errors=${nerr} errs=${nerr ? errs.join(",") : "-"} daemon_cpu=-1.0 ` +
      `redis_cpu=${redisCpu.toFixed(1)} bench_cpu=${benchCpu.toFixed(1)} ` +
      `machine_cpu=${machineCpu.toFixed(1)} rss_kb=-1 idle=0 held=0 ` +
      `stat_nodes=${clients.length} redis_cmds=${work.calls} ` +
      `redis_cmd_us=${work.usec} redis_cpu_us=${(work.cpuS * 1e6).toFixed(0)} ` +
      `cmds_per_cycle=${perCycle(work.calls).toFixed(3)} ` +
      `cmd_us_per_cycle=${perCycle(work.usec).toFixed(2)} ` +
      `cpu_us_per_cycle=${perCycle(work.cpuS * 1e6).toFixed(2)} ` +
      `cmd_mix=${mix} work_cycles=${st.cyclesAll} settled=${settled ? 1 : 0}` +
      `${o.tag ? " tag=" + o.tag : ""}`,
  );
}

async function main() {
  const o = parseArgs(process.argv);
  // A hard bound on the whole process, whatever happens to the nodes.
  const limitS =
    (o.warmup + o.duration + o.drain + 1) * o.concurrency.length + 30;
  setTimeout(() => {
    process.stderr.write("node_redlock_bench: hard time limit reached\n");
    process.exit(3);
  }, limitS * 1000).unref();
  const clients = o.redis.map((p) => {
    const common = {
      enableAutoPipelining: o.autoPipelining,
      maxRetriesPerRequest: 1,
      enableOfflineQueue: true,
    };
    const a = p.replace(/^(unix|redis):\/\//, "");
    if (a.includes("/")) return new Redis({ path: a, ...common });
    const i = a.lastIndexOf(":");
    if (i <= 0) throw new Error(`bad node address ${p} (path or host:port)`);
    return new Redis({ host: a.slice(0, i), port: Number(a.slice(i + 1)), ...common });
  });
  await Promise.all(
    clients.map(
      (c) =>
        new Promise((resolve, reject) => {
          if (c.status === "ready") return resolve();
          c.once("ready", resolve);
          c.once("error", reject);
        }),
    ),
  );
  const redlock = new Redlock(clients, {
    driftFactor: 0.01,
    retryCount: 0,
    retryDelay: 0,
    retryJitter: 0,
  });
  // Redlock re-emits client errors; without a listener they would throw.
  redlock.on("error", () => {});
  let runNo = 0;
  for (const conc of o.concurrency) {
    await runOne(o, redlock, clients, conc, ++runNo);
    await sleep(200);
  }
  await Promise.all(clients.map((c) => c.quit().catch(() => {})));
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`node_redlock_bench: ${e && e.stack ? e.stack : e}\n`);
    process.exit(1);
  },
);
