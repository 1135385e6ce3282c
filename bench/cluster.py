"""Scoring code snippets in sandboxes from a Ray job, through a cluster gateway, on 1, 2 and 3 nodes.

    sudo python3 bench/cluster.py [--snippets 1000] [--tasks 6]

Builds a 3-node Ray cluster on this machine, each node in a network namespace of its own
(tests/raycluster.py), and a gateway (``hutch serve --cluster``) in the head's. For k = 1, 2,
3 it drains all but k nodes and runs the job: a Ray map of ``score`` over ``--tasks`` chunks of
the snippets; each task makes one sandbox with ``hutch.Sandbox.create()`` from inside the task
(the SDK labels it with the task's node, which the gateway prefers when it has room) and runs
each of its snippets there (``python3 -c``), checking the printed result. It prints the wall
time of each run and where the sandboxes went.

Honest about this machine: the three nodes share its 2 cores, so the wall time cannot fall
with more nodes here; what the table shows is that spreading over nodes costs little, and
where the sandboxes went. On separate machines the work of each node is its own.

``--job ADDRESS HOME`` is the job itself (run inside the head's namespace, as a Ray driver);
the tests run it too (tests/integration/test_cluster.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def job(address: str, home: str, snippets: int, tasks: int, pin: bool) -> dict[str, Any]:
    import ray

    env = {"HUTCH_HOME": home}  # the gateway's unix socket (one machine here; elsewhere HUTCH_HOST and a key)
    ray.init(address=address, runtime_env={"env_vars": env}, log_to_driver=False, logging_level="ERROR")

    @ray.remote(num_cpus=0.01)
    def score(chunk: list[int]) -> dict[str, Any]:
        import ray as in_task

        import hutch

        where = in_task.util.get_node_ip_address()
        with hutch.Sandbox.create(memory="256M") as sbx:
            node = sbx.refresh().get("node")
            ok = 0
            for n in chunk:
                r = sbx.exec(["python3", "-c", f"print(sum(i * i for i in range({n})))"])
                ok += r.stdout.strip() == str(sum(i * i for i in range(n)))
        return {"task_node": where, "sandbox_node": node, "ok": ok, "n": len(chunk)}

    nodes = [n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]]
    items = list(range(snippets))
    chunks = [items[i::tasks] for i in range(tasks)]
    start = time.perf_counter()
    calls = []
    for i, chunk in enumerate(chunks):
        f = score.options(resources={f"node:{nodes[i % len(nodes)]}": 0.001}) if pin else score
        calls.append(f.remote(chunk))
    results = ray.get(calls)
    wall = time.perf_counter() - start
    ray.shutdown()
    return {"wall_s": round(wall, 2), "results": results}


def run_job(cluster: Any, home: Path, snippets: int, tasks: int, pin: bool) -> dict[str, Any]:
    argv = ["ip", "netns", "exec", cluster.head.ns, sys.executable, str(Path(__file__).resolve()), "--job"]
    argv += [cluster.address, str(home), "--snippets", str(snippets), "--tasks", str(tasks)] + (["--pin"] if pin else [])
    env = cluster.env(cluster.head) | {"PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    doc: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return doc


def numbers(client: Any, names: list[str], place: int) -> None:
    """Create -> first result on the gateway's own node against a remote one (medians of 5, same
    run), then ``place`` sandboxes created 10 at a time over every node: time to all ready."""
    import statistics
    from concurrent.futures import ThreadPoolExecutor

    def first(node: str) -> float:
        t = time.perf_counter()
        rec = client.create({"provider_options": {"node": node}})
        client.exec(rec["id"], {"command": ["true"]})
        took = time.perf_counter() - t
        client.destroy(rec["id"])
        return took

    local = statistics.median(first(names[0]) for _ in range(5))
    remote = statistics.median(first(names[1]) for _ in range(5))
    print(f"create -> first result: gateway's node {local * 1000:.0f} ms, another node {remote * 1000:.0f} ms (medians of 5)")
    t = time.perf_counter()
    with ThreadPoolExecutor(10) as pool:
        made = list(pool.map(lambda _: client.create({"limits": {"memory": 64 << 20}}), range(place)))
    took = time.perf_counter() - t
    per: dict[str, int] = {}
    for rec in made:
        per[rec["node"]] = per.get(rec["node"], 0) + 1
    print(f"{place} sandboxes placed and running in {took:.1f} s ({place / took:.1f}/s): {per}", flush=True)
    with ThreadPoolExecutor(10) as pool:
        list(pool.map(lambda rec: client.destroy(rec["id"]), made))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", nargs=2, metavar=("ADDRESS", "HOME"))
    parser.add_argument("--snippets", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--pin", action="store_true", help="spread the tasks over the nodes (one node each, in turn)")
    parser.add_argument(
        "--place", type=int, default=0, help="instead of the job: create -> first result, then N sandboxes placed"
    )
    args = parser.parse_args()
    if args.job:
        print(json.dumps(job(args.job[0], args.job[1], args.snippets, args.tasks, args.pin)))
        return
    sys.path.insert(0, str(ROOT))
    from tests import raycluster
    from tests.conftest import sweep

    from hutch.client import Client
    from hutch.config import Settings

    root = Path(tempfile.mkdtemp(prefix="hr-", dir="/tmp"))
    root.chmod(0o755)
    cluster = raycluster.start(root, resources=[{"hutch_sandboxes": 400.0}] * 3)
    home = root / "gw"
    home.mkdir()
    gateway = raycluster.Gateway(cluster, home).start()
    client = Client(Settings.load(home=home), autostart=False)
    try:
        end = time.monotonic() + 300
        while sum(n["state"] == "ready" for n in client.cluster_nodes()) < 3 and time.monotonic() < end:
            time.sleep(1)
        names = [n.ip for n in cluster.nodes]
        if args.place:
            print(f"load {os.getloadavg()[0]:.1f}", flush=True)
            numbers(client, names, args.place)
            return
        print(f"load {os.getloadavg()[0]:.1f}; {args.snippets} snippets in {args.tasks} tasks", flush=True)
        print("| nodes | wall (s) | snippets/s | sandboxes per node | tasks on the node of their sandbox |")
        print("|---|---|---|---|---|")
        for k in (1, 2, 3):
            for name in names:
                client.cluster_drain(name, name not in names[:k])
            doc = run_job(cluster, home, args.snippets, args.tasks, pin=True)
            per: dict[str, int] = {}
            for r in doc["results"]:
                per[r["sandbox_node"]] = per.get(r["sandbox_node"], 0) + 1
                assert r["ok"] == r["n"], r
            local = sum(r["task_node"] == r["sandbox_node"] for r in doc["results"])
            rate = args.snippets / doc["wall_s"]
            spread = ", ".join(f"{n}: {c}" for n, c in sorted(per.items()))
            print(f"| {k} | {doc['wall_s']} | {rate:.0f} | {spread} | {local} of {len(doc['results'])} |", flush=True)
    finally:
        client.close()
        gateway.stop()
        cluster.teardown()
        for node in cluster.nodes:
            sweep(node.home)
        subprocess.run(["rm", "-rf", str(root)], check=False)


if __name__ == "__main__":
    main()
