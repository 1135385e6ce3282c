"""CPU time (user+system) per operation, old vs new hutch, interleaved: far less sensitive to a busy machine than wall time.

usage: python cpucmp.py OLD_TREE NEW_TREE [rounds]
For each tree: a daemon in a throwaway HUTCH_HOME, one sandbox; per round and tree:
  - CLI `hutch exec SBX -- true`: CPU of the hutch client process (rusage of the child)
  - SDK exec round trip x20: CPU of the daemon (/proc/PID/stat utime+stime delta) + of the SDK caller process
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


class Tree:
    def __init__(self, root: str):
        self.root = Path(root)
        self.py = str(self.root / ".venv/bin/python")
        self.hutch = str(self.root / ".venv/bin/hutch")
        self.home = Path(tempfile.mkdtemp(prefix="cpucmp-"))
        os.chmod(self.home, 0o711)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HUTCH_")} | {"HUTCH_HOME": str(self.home / "h")}
        out = subprocess.run([self.hutch, "create", "--json"], env=self.env, capture_output=True, text=True, check=True)
        self.sbx = json.loads(out.stdout)["id"]
        pid_file = next(self.home.rglob("daemon.pid"), None) or next(self.home.rglob("*.pid"))
        self.daemon = int(pid_file.read_text().split()[0])

    def cli_exec(self) -> float:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([self.hutch, "exec", self.sbx, "--", "true"], env=self.env, check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    def sdk_exec(self, n: int = 20) -> tuple[float, float]:
        code = f"""
import os, time, hutch
s = hutch.Sandbox.connect({self.sbx!r}) if hasattr(hutch.Sandbox, 'connect') else hutch.Sandbox.get({self.sbx!r})
s.exec(['true'])
t0 = os.times();
for _ in range({n}): s.exec(['true'])
t1 = os.times()
print((t1.user - t0.user) + (t1.system - t0.system))
"""
        d0 = proc_cpu(self.daemon)
        out = subprocess.run([self.py, "-c", code], env=self.env, capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(out.stderr)
        d1 = proc_cpu(self.daemon)
        return (d1 - d0) / n, float(out.stdout.strip()) / n

    def close(self) -> None:
        subprocess.run([self.hutch, "destroy", self.sbx], env=self.env, capture_output=True)
        subprocess.run([self.hutch, "daemon", "stop"], env=self.env, capture_output=True)


def main() -> None:
    old, new = Tree(sys.argv[1]), Tree(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    res = {t: {"cli": [], "daemon": [], "sdk": []} for t in ("old", "new")}
    try:
        for r in range(rounds):
            for name, t in (("old", old), ("new", new)) if r % 2 == 0 else (("new", new), ("old", old)):
                res[name]["cli"].append(t.cli_exec())
                d, s = t.sdk_exec()
                res[name]["daemon"].append(d)
                res[name]["sdk"].append(s)
    finally:
        old.close()
        new.close()
    print(f"load {os.getloadavg()}")
    for k in ("cli", "daemon", "sdk"):
        o, n = statistics.median(res["old"][k]) * 1000, statistics.median(res["new"][k]) * 1000
        print(f"{k:7s} CPU ms/op  old {o:7.2f}  new {n:7.2f}  ratio {n / o:.2f}")


main()
