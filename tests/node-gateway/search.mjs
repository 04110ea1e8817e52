// The gateway's own transcript search over its own index (tests/gateway_conformance.py).
// argv: agentId; stdin: a JSON list of queries; stdout: one JSON answer a line.
// The state dir comes from OPENCLAW_STATE_DIR.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const dist = join(import.meta.dirname, "node_modules", "openclaw", "dist");
let search;
for (const name of readdirSync(dist).filter((n) => /^session-transcript-search-.*\.mjs$/.test(n))) {
  search ??= (await import(join(dist, name))).searchSessionTranscriptsReadOnlySync;
}
if (!search) throw new Error("no session-transcript-search chunk exports searchSessionTranscriptsReadOnlySync");
for (const query of JSON.parse(readFileSync(0, "utf8"))) {
  process.stdout.write(`${JSON.stringify(search({ query, agentId: process.argv[2], limit: 25 }))}\n`);
}
