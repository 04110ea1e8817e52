"""Writes sessionsearch/demo_data: the sample state dir the demo imports (run again to refresh it)."""

import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "sessionsearch" / "demo_data"
T0 = 1767323045000  # 2026-01-02T03:04:05Z
DAY = 86_400_000


def iso(ms: int) -> str:
    from datetime import datetime, timezone
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Transcript:
    def __init__(self, session_id: str, start: int) -> None:
        self.rows = [{"type": "session", "version": 3, "id": session_id, "timestamp": iso(start)}]
        self.t = start
        self.leaf = None
        self.n = 0

    def say(self, role: str, content, **extra) -> str:
        self.n += 1
        self.t += 45_000
        mid = f"{self.rows[0]['id']}-m{self.n}"
        self.rows.append({"type": "message", "id": mid, "parentId": self.leaf, "timestamp": iso(self.t),
                          "message": {"role": role, "content": content, "timestamp": self.t}, **extra})
        self.leaf = mid
        return mid

    def event(self, row: dict, moves_leaf: bool = True) -> None:
        self.n += 1
        row = {"id": f"{self.rows[0]['id']}-e{self.n}", "parentId": self.leaf, "timestamp": iso(self.t), **row}
        self.rows.append(row)
        if moves_leaf:
            self.leaf = row["id"]

    def write(self, folder: Path) -> None:
        with open(folder / f"{self.rows[0]['id']}.jsonl", "w", encoding="utf-8") as fh:
            for row in self.rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def main() -> None:
    shutil.rmtree(ROOT, ignore_errors=True)
    sessions: dict[str, dict[str, dict]] = {"main": {}, "work_bot": {}}
    files: dict[str, list[Transcript]] = {"main": [], "work_bot": []}

    main_t = Transcript("main-0001", T0)
    main_t.say("user", "I'm applying for a mortgage loan of 240,000 EUR with Banca Sella; the rate offered is 3.1%.")
    main_t.say("assistant", "Noted: mortgage loan, 240,000 EUR, Banca Sella, 3.1% fixed. Want a repayment plan?")
    kept = main_t.say("user", "Yes, 25 years. Also remind me the notary appointment is on March 3rd.")
    main_t.say("assistant", [{"type": "thinking", "thinking": "compute the annuity"},
                             {"type": "text", "text": "Over 25 years at 3.1% the monthly payment is about 1,151 EUR."}])
    main_t.event({"type": "reset", "reason": "daily", "firstKeptEntryId": kept})
    main_t.say("user", "New day. What did I tell you about the notary?")
    main_t.say("assistant", "You said the notary appointment for the loan is on March 3rd.")
    files["main"].append(main_t)
    sessions["main"]["agent:main:main"] = {"sessionId": "main-0001", "updatedAt": main_t.t, "label": "Main",
                                           "kind": "direct"}

    dm = Transcript("dm-maria-01", T0 + DAY)
    dm.say("user", "Ciao! Il prestito per la casa è stato approvato, festeggiamo al café più tardi?")
    dm.say("assistant", "Che bella notizia! Ti ricordo che il rogito è il 3 marzo.")
    files["main"].append(dm)
    sessions["main"]["agent:main:whatsapp:dm:+15550001"] = {
        "sessionId": "dm-maria-01", "updatedAt": dm.t, "displayName": "Maria (WhatsApp)", "kind": "direct"}

    sub = Transcript("sub-research-01", T0 + 2 * DAY)
    sub.say("user", "Research per-session communication controls in the Control UI.")
    sub.say("assistant", "Per-session communication controls let operators mute or route each conversation.")
    files["main"].append(sub)
    sessions["main"]["agent:main:subagent:research-1"] = {
        "sessionId": "sub-research-01", "updatedAt": sub.t, "label": "Per-session communication controls in UI",
        "kind": "subagent", "spawnedBy": "agent:main:main"}

    rew = Transcript("car-plans-01", T0 + 3 * DAY)
    first = rew.say("user", "Should I sell the car to pay the loan deposit?")
    rew.say("assistant", "Selling the car would cover the deposit; that is the abandoned plan if you keep it.")
    rew.say("user", "Let me think again.")
    rew.event({"type": "leaf", "targetId": first}, moves_leaf=False)
    rew.leaf = first
    rew.say("assistant", "Alternatively keep the car and ask the bank for a smaller deposit.")
    files["main"].append(rew)
    sessions["main"]["agent:main:car-plans"] = {"sessionId": "car-plans-01", "updatedAt": rew.t,
                                                "label": "Car and deposit", "kind": "direct"}

    secret = Transcript("incognito-01", T0 + 4 * DAY)
    secret.say("user", "Plan a surprise party for Maria after the loan is signed.")
    secret.say("assistant", "A surprise party it is; I will not mention it elsewhere.")
    files["main"].append(secret)
    sessions["main"]["agent:main:incognito"] = {"sessionId": "incognito-01", "updatedAt": secret.t,
                                                "incognito": True, "kind": "direct"}

    work = Transcript("work-tokyo-01", T0 + 5 * DAY)
    work.say("user", "東京の会議は明日の10時です。ローンの資料を準備してください。")
    work.say("assistant", "了解しました。東京の会議用にローンの資料を準備します。")
    work.say("user", "我们明天在北京开会讨论贷款。")
    work.say("assistant", "好的，我会准备北京会议的贷款材料。")
    work.say("toolResult", "calendar: meeting Tokyo 10:00")
    files["work_bot"].append(work)
    sessions["work_bot"]["agent:work_bot:main"] = {"sessionId": "work-tokyo-01", "updatedAt": work.t,
                                                   "label": "Work bot", "kind": "direct"}

    for agent, entries in sessions.items():
        folder = ROOT / "agents" / agent / "sessions"
        folder.mkdir(parents=True)
        (folder / "sessions.json").write_text(json.dumps(entries, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        for transcript in files[agent]:
            transcript.write(folder)


if __name__ == "__main__":
    main()
