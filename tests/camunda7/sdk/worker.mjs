// The official Camunda 7 external task client (camunda-external-task-client-js)
// as a user would write a worker, against tests/camunda7/camunda7_emu.  Used
// by check_camunda7_sdk and by bench/camunda7_peers.
//
// Environment: CAMUNDA_URL (the engine-rest root), SDK_TOPIC (default
// "sdk_topic"), SDK_WORKER_ID (default "sdk-worker"), SDK_MAX_TASKS (default
// 2), SDK_CONCURRENCY (maxParallelExecutions, default unset), SDK_INTERVAL_MS
// (default 50), SDK_ASYNC_TIMEOUT_MS (asyncResponseTimeout, default 1000),
// SDK_LOCK_MS (lockDuration, default 50000), SDK_USER/SDK_PASSWORD (basic
// auth interceptor); SDK_COMMAND: run this command (split on blanks) for
// every task and complete on exit 0, fail with retries 0 otherwise, as lessee
// does, instead of the test behaviour.
//
// Test behaviour, by the task's variable "mode":
//   "complete" (default)  complete with variables {doubled: 2n, by: "sdk",
//                         info: {n}} and localVariables {seen: true}
//   "fail"                handleFailure: errorMessage "asked to fail",
//                         errorDetails "sdk details", retries = the task's
//                         retries (3 when null) - 1, retryTimeout 0
//   "bpmn"                handleBpmnError "SDK_ERROR", "sdk says no", {why: "bpmn"}
//   "extend"              extendLock(SDK_EXTEND_MS, default 20000), then complete
// Prints "sdk-worker: polling" once started; exits 0 on SIGTERM.
import { spawn } from "node:child_process";
import {
  Client,
  Variables,
  BasicAuthInterceptor,
} from "camunda-external-task-client-js";

const env = process.env;
const topic = env.SDK_TOPIC || "sdk_topic";
const command = env.SDK_COMMAND ? env.SDK_COMMAND.split(/\s+/).filter(Boolean) : null;
const num = (v, d) => (v === undefined || v === "" ? d : Number(v));

function runCommand(argv) {
  return new Promise((resolve) => {
    const child = spawn(argv[0], argv.slice(1), { stdio: "ignore" });
    child.on("error", () => resolve(127));
    child.on("exit", (code, signal) => resolve(signal ? 128 : code));
  });
}

const silent = () => {}; // the client's own logger prints every poll
const client = new Client({
  baseUrl: env.CAMUNDA_URL,
  workerId: env.SDK_WORKER_ID || "sdk-worker",
  maxTasks: num(env.SDK_MAX_TASKS, 2),
  maxParallelExecutions: env.SDK_CONCURRENCY ? Number(env.SDK_CONCURRENCY) : undefined,
  interval: num(env.SDK_INTERVAL_MS, 50),
  asyncResponseTimeout: num(env.SDK_ASYNC_TIMEOUT_MS, 1000),
  lockDuration: num(env.SDK_LOCK_MS, 50000),
  use: [silent],
  interceptors: env.SDK_USER
    ? new BasicAuthInterceptor({ username: env.SDK_USER, password: env.SDK_PASSWORD || "" })
    : undefined,
});

client.on("poll:error", (e) => console.log(`sdk-worker: poll error: ${e.message}`));
for (const ev of ["complete", "handleFailure", "handleBpmnError", "extendLock"])
  client.on(`${ev}:error`, (_t, e) => console.log(`sdk-worker: ${ev} error: ${e.message}`));

async function handler({ task, taskService }) {
  if (command) {
    const code = await runCommand(command);
    if (code === 0) return taskService.complete(task);
    return taskService.handleFailure(task, {
      errorMessage: `exit status ${code}`,
      retries: 0,
      retryTimeout: 0,
    });
  }
  const mode = task.variables.get("mode") || "complete";
  const n = task.variables.get("n") || 0;
  if (mode === "fail") {
    const retries = task.retries === null || task.retries === undefined ? 3 : task.retries;
    return taskService.handleFailure(task, {
      errorMessage: "asked to fail",
      errorDetails: "sdk details",
      retries: retries - 1,
      retryTimeout: 0,
    });
  }
  if (mode === "bpmn") {
    const v = new Variables().set("why", "bpmn");
    return taskService.handleBpmnError(task, "SDK_ERROR", "sdk says no", v);
  }
  if (mode === "extend") await taskService.extendLock(task, num(env.SDK_EXTEND_MS, 20000));
  const vars = new Variables().setAll({ doubled: 2 * n, by: "sdk", info: { n } });
  const local = new Variables().set("seen", true);
  return taskService.complete(task, vars, local);
}

client.subscribe(topic, handler);

function stop() {
  client.stop();
  process.exit(0);
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
console.log("sdk-worker: polling");
