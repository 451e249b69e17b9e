// graphile-worker and pg-boss measured like lessor in bench/lessor_pg.c:
// N no-op jobs enqueued first, then C concurrent handlers take and complete
// them (jobs/s, median of R rounds); then the wake-up: an idle worker, one
// job added, time until its handler runs (median of 21).
//
//   node queues.mjs graphile|pgboss CONNSTRING N C R
//
// Prints one line: {"system":..., "rate":..., "wake_ms":...}.
import { performance } from "node:perf_hooks";

const [system, conn, jobsArg, concArg, roundsArg] = process.argv.slice(2);
const jobs = Number(jobsArg), conc = Number(concArg), rounds = Number(roundsArg);
const median = (v) => {
  const s = [...v].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const noLog = { scope: () => noLog, error() {}, warn() {}, info() {}, debug() {} };

async function graphile() {
  const gw = await import("graphile-worker");
  const logger = new gw.Logger(() => () => {});
  const utils = await gw.makeWorkerUtils({ connectionString: conn, logger });
  await utils.migrate();
  const rates = [];
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < jobs; i += 50)
      await Promise.all(Array.from({ length: Math.min(50, jobs - i) }, () => utils.addJob("bench", {})));
    let done = 0, resolve;
    const all = new Promise((res) => (resolve = res));
    const t0 = performance.now();
    const runner = await gw.run({
      connectionString: conn, concurrency: conc, noHandleSignals: true, pollInterval: 2000, logger,
      taskList: { bench: async () => { if (++done === jobs) resolve(); } },
    });
    await all;
    await runner.stop(); // lets the last completions commit
    rates.push(jobs / ((performance.now() - t0) / 1000));
  }
  const wake = [];
  let sent = 0, got;
  const runner = await gw.run({
    connectionString: conn, concurrency: conc, noHandleSignals: true, pollInterval: 2000, logger,
    taskList: { lp: async () => got(performance.now() - sent) },
  });
  await sleep(200);
  for (let i = 0; i < 21; i++) {
    const p = new Promise((res) => (got = res));
    sent = performance.now();
    await utils.addJob("lp", {});
    wake.push(await p);
  }
  await runner.stop();
  await utils.release();
  return { rate: median(rates), wake_ms: median(wake) };
}

async function pgboss() {
  const { default: PgBoss } = await import("pg-boss");
  const boss = new PgBoss({ connectionString: conn, max: conc + 4, supervise: false, schedule: false });
  boss.on("error", () => {});
  await boss.start();
  await boss.createQueue("bench");
  await boss.createQueue("lp");
  const rates = [];
  // pg-boss polls: each worker fetches batchSize jobs per polling interval
  // (at least 0.5 s); C workers of one job each is the same concurrency
  const opts = { pollingIntervalSeconds: 0.5, batchSize: 1 };
  for (let r = 0; r < rounds; r++) {
    await boss.insert(Array.from({ length: jobs }, () => ({ name: "bench", data: {} })));
    let done = 0, resolve;
    const all = new Promise((res) => (resolve = res));
    const t0 = performance.now();
    for (let i = 0; i < conc; i++)
      await boss.work("bench", opts, async () => { if (++done === jobs) resolve(); });
    await all;
    await boss.offWork("bench");
    rates.push(jobs / ((performance.now() - t0) / 1000));
  }
  const wake = [];
  let sent = 0, got;
  await boss.work("lp", opts, async () => got(performance.now() - sent));
  await sleep(200);
  for (let i = 0; i < 21; i++) {
    const p = new Promise((res) => (got = res));
    sent = performance.now();
    await boss.send("lp", {});
    wake.push(await p);
  }
  await boss.stop({ graceful: false, wait: false });
  return { rate: median(rates), wake_ms: median(wake) };
}

const res = system === "graphile" ? await graphile() : await pgboss();
console.log(JSON.stringify({ system: system === "graphile" ? "graphile-worker" : "pg-boss", ...res }));
process.exit(0);
