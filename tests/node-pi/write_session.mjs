// The agent runtime's own SessionManager, driven by tests/test_real_writer.py (no model, no network).
//
// stdin: {"open": "<file>"}: open a transcript (the runtime migrates an older version in place), or
//        {"dir": "<sessions dir>", "steps": [{"op": "appendMessage", "args": [...], "as": "name"}, ...]}:
//        write a new session; an argument {"ref": "name"} is the id an earlier step returned.
// stdout: {"file", "sessionId", "leafId", "name", "entries": [every entry], "branch": [the active branch]}
import { readFileSync } from "node:fs";
import { SessionManager } from "@mariozechner/pi-coding-agent";

const program = JSON.parse(readFileSync(0, "utf8"));
// "clock": epoch ms: the runtime's clock starts there and moves 1 s a step, and a message without a
// timestamp gets the clock's, as a live one would (the entry's and the message's times then agree)
let tick = () => undefined;
if (program.clock !== undefined) {
  let now = program.clock;
  const RealDate = Date;
  globalThis.Date = class extends RealDate {
    constructor(...args) {
      super(...(args.length ? args : [now]));
    }
    static now() {
      return now;
    }
  };
  tick = () => {
    now += 1000;
    return now;
  };
}
let manager;
if (program.open) {
  manager = SessionManager.open(program.open);
} else {
  manager = SessionManager.create(program.dir, program.dir);
  const ids = {};
  const resolve = (value) => {
    if (Array.isArray(value)) return value.map(resolve);
    if (value && typeof value === "object") {
      if ("ref" in value) {
        if (!(value.ref in ids)) throw new Error(`no step named ${value.ref}`);
        return ids[value.ref];
      }
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, resolve(v)]));
    }
    return value;
  };
  for (const step of program.steps) {
    const now = tick();
    const args = resolve(step.args ?? []);
    if (step.op === "appendMessage" && now !== undefined && args[0].timestamp === undefined) args[0].timestamp = now;
    const result = manager[step.op](...args);
    if (step.as) ids[step.as] = result;
  }
}
process.stdout.write(JSON.stringify({
  file: manager.getSessionFile(),
  sessionId: manager.getSessionId(),
  leafId: manager.getLeafId(),
  name: manager.getSessionName() ?? null,
  entries: manager.getEntries(),
  branch: manager.getBranch(),
}));
