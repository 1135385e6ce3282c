// The core E2B flow with the official JS SDK (npm e2b), unchanged: the gateway comes from
// E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY; the SDK from E2B_JS_SDK (an npm prefix).
// Prints one line "@@" + JSON of what it saw; exits 1 on anything unexpected.
const path = require("node:path");
const { Sandbox, CommandExitError } = require(path.join(process.env.E2B_JS_SDK, "node_modules", "e2b"));

async function main() {
  const out = {};
  const sbx = await Sandbox.create({ metadata: { sdk: "js" }, timeoutMs: 120_000 });
  out.id = sbx.sandboxId;
  const r = await sbx.commands.run("echo hello-js; echo err >&2");
  out.run = [r.exitCode, r.stdout, r.stderr];
  const seen = [];
  const c = await sbx.commands.run("echo $FOO; pwd", { envs: { FOO: "bar" }, cwd: "/tmp", onStdout: (d) => seen.push(d) });
  out.callbacks = [c.stdout, seen.join("")];
  try {
    await sbx.commands.run("echo partial; exit 3");
  } catch (e) {
    out.exit = [e instanceof CommandExitError, e.exitCode, e.stdout];
  }
  const bg = await sbx.commands.run("sleep 1; echo later", { background: true });
  out.background = (await bg.wait()).stdout;
  const seenEvents = [];
  const watch = await sbx.files.watchDir("/workspace", (ev) => seenEvents.push([ev.name, ev.type]));
  await sbx.files.write("/workspace/j.txt", "from js");
  for (let i = 0; i < 600 && !seenEvents.some((e) => e[0] === "j.txt" && e[1] === "write"); i++) {
    await new Promise((r) => setTimeout(r, 100)); // until the stream brings it (a minute at most)
  }
  await watch.stop();
  out.watched = seenEvents;
  out.text = await sbx.files.read("/workspace/j.txt");
  out.bytes = Array.from(await sbx.files.read("/workspace/j.txt", { format: "bytes" }));
  out.list = (await sbx.files.list("/workspace")).map((e) => [e.name, e.type, e.size]);
  out.exists = [await sbx.files.exists("/workspace/j.txt"), await sbx.files.exists("/workspace/nope")];
  out.listed = (await Sandbox.list().nextItems()).map((s) => s.sandboxId).includes(sbx.sandboxId);
  out.killed = await sbx.kill();
  out.running = await sbx.isRunning();
  console.log("@@" + JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
