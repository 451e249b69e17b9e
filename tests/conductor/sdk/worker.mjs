// The official Conductor JS SDK's worker (TaskManager), as a user would write
// one, against tests/conductor/conductor_emu.  Used by check_conductor_sdk and
// by bench/conductor_peers.
//
// Environment: CONDUCTOR_SERVER_URL (and CONDUCTOR_AUTH_KEY/_SECRET), read by
// the SDK itself; SDK_TASK_TYPE (default "sdk_task"), SDK_CONCURRENCY
// (default 2), SDK_WORKER_ID, SDK_POLL_TIMEOUT_MS (batchPollingTimeout,
// default 100); SDK_COMMAND: run this command (split on blanks) for every task
// and report its exit status, as lessee does, instead of the test behaviour.
//
// Test behaviour, by the task's inputData.mode:
//   "complete" (default)  COMPLETED, outputData {n, doubled, by: "sdk"}
//   "fail"                throws: the SDK reports FAILED with the message
//   "slow"                waits inputData.ms first (lease extension at work)
// Each adds the log line "sdk saw N" through the task context.
// Prints "sdk-worker: polling" once started; exits 0 on SIGTERM after
// stopping its pollers.
import { spawn } from "node:child_process";
import {
  orkesConductorClient,
  TaskManager,
  getTaskContext,
} from "@io-orkes/conductor-javascript";

const env = process.env;
const taskType = env.SDK_TASK_TYPE || "sdk_task";
const command = env.SDK_COMMAND ? env.SDK_COMMAND.split(/\s+/).filter(Boolean) : null;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function runCommand(argv) {
  return new Promise((resolve) => {
    const child = spawn(argv[0], argv.slice(1), { stdio: "ignore" });
    child.on("error", () => resolve(127));
    child.on("exit", (code, signal) => resolve(signal ? 128 : code));
  });
}

async function execute(task) {
  const input = task.inputData || {};
  if (command) {
    const code = await runCommand(command);
    if (code !== 0) throw new Error(`exit status ${code}`);
    return { status: "COMPLETED", outputData: { exit: 0 } };
  }
  getTaskContext()?.addLog(`sdk saw ${input.n}`);
  if (input.mode === "slow") await sleep(input.ms || 0);
  if (input.mode === "fail") throw new Error("asked to fail");
  return {
    status: "COMPLETED",
    outputData: { n: input.n, doubled: 2 * (input.n || 0), by: "sdk" },
  };
}

const client = await orkesConductorClient({ serverUrl: env.CONDUCTOR_SERVER_URL });
const manager = new TaskManager(
  client,
  [
    {
      taskDefName: taskType,
      concurrency: Number(env.SDK_CONCURRENCY || 2),
      pollInterval: 50,
      leaseExtendEnabled: true,
      execute,
    },
  ],
  {
    options: {
      workerID: env.SDK_WORKER_ID || "sdk-worker",
      batchPollingTimeout: Number(env.SDK_POLL_TIMEOUT_MS || 100),
    },
  },
);

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  await manager.stopPolling();
  client.stopBackgroundRefresh?.();
  process.exit(0);
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);

manager.startPolling();
console.log("sdk-worker: polling");
