// graphile-worker as a worker that runs a command per job, for
// bench/graphile_peers.c: N jobs added first, then a runner with C
// concurrent handlers, each spawning COMMAND (no shell) and completing the
// job when it exits 0.  Measured in this process over the N runs: jobs/s,
// its own user+system CPU per job (process.cpuUsage: the commands' CPU is not
// in it) and its peak RSS (resourceUsage().maxRSS, KiB).
//
//   node graphile_spawn.mjs CONNSTRING N C COMMAND [ARG...]
//
// Prints one line: {"rate":..., "cpu_us_per_run":..., "peak_rss_kib":...}.
import { spawn } from "node:child_process";
import { performance } from "node:perf_hooks";

const [conn, jobsArg, concArg, ...command] = process.argv.slice(2);
const jobs = Number(jobsArg), conc = Number(concArg);
const gw = await import("graphile-worker");
const logger = new gw.Logger(() => () => {});
const utils = await gw.makeWorkerUtils({ connectionString: conn, logger });
await utils.migrate();
for (let i = 0; i < jobs; i += 50)
  await Promise.all(Array.from({ length: Math.min(50, jobs - i) }, () => utils.addJob("bench", {})));

const run = () =>
  new Promise((resolve, reject) => {
    const child = spawn(command[0], command.slice(1), { stdio: "ignore" });
    child.on("error", reject);
    child.on("exit", (code) => (code === 0 ? resolve() : reject(new Error(`exit ${code}`))));
  });
let done = 0, resolveAll;
const all = new Promise((res) => (resolveAll = res));
const cpu0 = process.cpuUsage();
const t0 = performance.now();
const runner = await gw.run({
  connectionString: conn, concurrency: conc, noHandleSignals: true, pollInterval: 2000, logger,
  taskList: { bench: async () => { await run(); if (++done === jobs) resolveAll(); } },
});
await all;
const t1 = performance.now();
const cpu = process.cpuUsage(cpu0);
await runner.stop();
await utils.release();
console.log(JSON.stringify({
  rate: jobs / ((t1 - t0) / 1000),
  cpu_us_per_run: (cpu.user + cpu.system) / jobs,
  peak_rss_kib: process.resourceUsage().maxRSS,
}));
