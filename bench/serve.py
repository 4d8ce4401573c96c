"""`tempering serve` under load: fair queueing against FIFO, agent runs, and a load test.

Each part starts a server in a process of its own (the client's event loop would otherwise share
the server's interpreter lock) and talks HTTP to it, as a client would:

- fairness: two tenants (API keys) on a tiny random model (each request `--tokens` tokens, the
  end token ignored; `--max-running` sequences at once). The engine's capacity is measured
  first with a closed loop; then the heavy tenant floods (`--heavy-clients` requests always
  outstanding, so it gets about the capacity) while the light one arrives open-loop at a tenth
  of the capacity (10x fewer requests), with `serve.queue = "fair"` and with "fifo": the light
  tenant's p99 latency in each and their ratio (FIFO / fair, the target >= 5).
- agent runs: `--sessions` clients each running agent runs back to back for `--agent-s` seconds
  against the shipped terminal task fix-median-even, played by a scripted policy (its turns fix
  the bug with a command, check it with another and submit; models.scripted) in sandbox sessions,
  verified by the task's hidden tests: completed runs per second, their mean reward.
- load: `--requests` chat completions from `--concurrency` clients; a request is lost unless it
  is answered 200 with the policy's known answer.

Prints one JSON object. Usage: python bench/serve.py [--flood-s 20] [--sessions 16] [--requests 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import multiprocessing as mp
import os
import platform
import sys
import time

import httpx

HEAVY, LIGHT = "sk-heavy-0123456789", "sk-light-0123456789"
# the scripted policy: after the instruction (it ends with a newline), fix median with sed, check, submit
FIX = (r"$run sed -i 's/^    return ordered\[middle\]$/    return ordered[middle] if len(ordered) % 2 else "
       r"(ordered[middle - 1] + ordered[middle]) \/ 2/' stats.py")
CHECK = "$run python3 -c 'import stats; print(stats.median([5, 1, 3, 2]))'"
SCRIPT = [["\n", FIX], [">[exit code 0]\n", CHECK], [">2.5\n[exit code 0]\n", "$submit"],
          [" ", "Served."]]  # a chat transcript ends with "assistant: "


def serve(kind: str, queue: str, max_running: int, ready: mp.Queue) -> None:
    """The server process: a tiny random model ("random") or the scripted policy ("scripted")."""
    import torch

    from tempering.config import SandboxConfig, ServeConfig, TenantConfig
    from tempering.engine import LLM
    from tempering.models import Arch, build_model
    from tempering.models.scripted import scripted_policy
    from tempering.serve.server import Server
    from tempering.serve.tenants import Tenants
    from tempering.tokenizer import char_tokenizer

    torch.set_num_threads(1)
    if kind == "random":
        tok = char_tokenizer("abcdefghijklmnopqrstuvwxyz :\n")
        arch = Arch(vocab_size=tok.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512)
        model = build_model(arch, seed=0)
    else:
        model, tok = scripted_policy(SCRIPT)
    cfg = ServeConfig(queue=queue, max_running=max_running, tool_parser="compact", max_agent_runs=64,
                      max_queued=100_000, request_timeout_s=600, tenants={"heavy": TenantConfig(), "light": TenantConfig()})
    tenants = Tenants(cfg.tenants, {HEAVY: "heavy", LIGHT: "light"})
    engine = LLM(model, tok, max_seq_len=4096, max_batch_size=max(max_running, 16))
    srv = Server(engine, port=0, model_name="m", cfg=cfg, tenants=tenants, sandbox=SandboxConfig(workers=4))
    srv.loop.start()
    ready.put(srv.server_address[1])
    srv.serve_forever()


class Served:
    """A server process for one part of the bench."""

    def __init__(self, kind: str, queue: str = "fair", max_running: int = 0):
        ctx = mp.get_context("spawn")
        ready = ctx.Queue()
        self.proc = ctx.Process(target=serve, args=(kind, queue, max_running, ready), daemon=True)
        self.proc.start()
        self.url = f"http://127.0.0.1:{ready.get(timeout=300)}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.join(30)


async def complete(client: httpx.AsyncClient, key: str, tokens: int) -> float:
    """One completion of `tokens` tokens; -> its latency (raises on anything but 200)."""
    start = time.perf_counter()
    r = await client.post("/v1/completions", json={"prompt": "ab", "max_tokens": tokens, "ignore_eos": True,
                                                   "temperature": 0}, headers={"Authorization": f"Bearer {key}"})
    r.raise_for_status()
    return time.perf_counter() - start


async def capacity(url: str, tokens: int, clients: int, seconds: float) -> float:
    """Requests per second the server finishes with `clients` always waiting (a closed loop)."""
    done, end = 0, time.perf_counter() + seconds

    async def loop(c: httpx.AsyncClient) -> None:
        nonlocal done
        while time.perf_counter() < end:
            await complete(c, HEAVY, tokens)
            done += 1

    start = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=httpx.Limits(max_connections=None)) as c:
        await asyncio.gather(*(loop(c) for _ in range(clients)))
    return done / (time.perf_counter() - start)


async def flood(url: str, tokens: int, heavy_clients: int, light_rate: float, seconds: float) -> tuple[list[float], float]:
    """The heavy tenant floods (`heavy_clients` requests always outstanding, more than the engine
    runs) while the light one arrives open-loop at `light_rate`. -> (the light tenant's latencies,
    the heavy tenant's achieved requests per second)."""
    light: list[float] = []
    heavy_done = 0
    start = time.perf_counter() + 0.5
    end = start + seconds

    async def heavy(c: httpx.AsyncClient) -> None:
        nonlocal heavy_done
        await asyncio.sleep(max(0.0, start - time.perf_counter()))
        while time.perf_counter() < end:
            await complete(c, HEAVY, tokens)
            heavy_done += 1

    async def send(c: httpx.AsyncClient, at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        light.append(await complete(c, LIGHT, tokens))

    async with httpx.AsyncClient(base_url=url, timeout=600, limits=httpx.Limits(max_connections=None)) as c:
        jobs = [heavy(c) for _ in range(heavy_clients)]
        jobs += [send(c, start + (i + 0.5) / light_rate) for i in range(max(1, int(seconds * light_rate)))]
        await asyncio.gather(*jobs)
    return light, heavy_done / (time.perf_counter() - start)


def p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(0.99 * len(s)) - 1))]


def fairness(args: argparse.Namespace) -> dict:
    served = Served("random", "fair", args.max_running)
    try:
        cap = asyncio.run(capacity(served.url, args.tokens, 2 * args.max_running, 4.0))
    finally:
        served.close()
    light_rate = cap / 10  # the heavy tenant gets about the engine's capacity: 10x the light one's rate
    out: dict = {"capacity_requests_per_s": round(cap, 2), "heavy_clients": args.heavy_clients,
                 "light_requests_per_s": round(light_rate, 2)}
    for queue in ("fair", "fifo"):
        served = Served("random", queue, args.max_running)
        try:
            light, heavy_rate = asyncio.run(flood(served.url, args.tokens, args.heavy_clients, light_rate, args.flood_s))
        finally:
            served.close()
        out[f"heavy_requests_per_s_{queue}"] = round(heavy_rate, 2)
        out[f"light_p99_{queue}_s"] = round(p99(light), 4)
        out[f"light_p50_{queue}_s"] = round(sorted(light)[len(light) // 2], 4)
        print(f"[bench] {queue}: light p99 {out[f'light_p99_{queue}_s']} s over {len(light)} requests, "
              f"heavy {heavy_rate:.2f} requests/s", file=sys.stderr, flush=True)
    out["light_p99_ratio"] = round(out["light_p99_fifo_s"] / out["light_p99_fair_s"], 2)
    return out


async def agent_runs(url: str, sessions: int, seconds: float) -> dict:
    rewards: list[float] = []
    failures: list[str] = []
    end = 0.0

    async def loop(c: httpx.AsyncClient, once: bool = False) -> None:
        while once or time.perf_counter() < end:
            once = False
            r = await c.post("/v1/agent/runs", json={"task": {"terminal": "fix-median-even"}, "temperature": 0},
                             headers={"Authorization": f"Bearer {LIGHT}"})
            body = r.json()
            if r.status_code != 200 or body.get("status") != "completed":
                failures.append(f"{r.status_code}: {body.get('error')}")
            else:
                rewards.append(body["reward"]["total"])

    async with httpx.AsyncClient(base_url=url, timeout=600, limits=httpx.Limits(max_connections=None)) as c:
        await loop(c, once=True)  # the first run sets the task's environment up (cached after)
        rewards.clear()
        start = time.perf_counter()
        end = start + seconds
        await asyncio.gather(*(loop(c) for _ in range(sessions)))
    wall = time.perf_counter() - start
    return {"agent_sessions": sessions, "agent_runs": len(rewards), "agent_runs_per_s": round(len(rewards) / wall, 3),
            "agent_reward_mean": round(sum(rewards) / max(1, len(rewards)), 3), "agent_failures": failures[:5]}


async def load(url: str, requests: int, concurrency: int) -> dict:
    lost, latencies, reasons = 0, [], collections.Counter()
    queue: asyncio.Queue = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)

    async def worker(c: httpx.AsyncClient) -> None:
        nonlocal lost
        while not queue.empty():
            queue.get_nowait()
            start = time.perf_counter()
            why = ""
            try:
                r = await c.post("/v1/chat/completions", json={"model": "m", "messages": [
                    {"role": "user", "content": "hi"}], "max_tokens": 8}, headers={"Authorization": f"Bearer {LIGHT}"})
                if r.status_code != 200:
                    why = f"{r.status_code}: {r.text[:120]}"
                elif (said := r.json()["choices"][0]["message"]["content"]) != "Served.":
                    why = f"200 with {said!r}"
            except (httpx.HTTPError, KeyError, ValueError) as e:
                why = f"{type(e).__name__}: {e}"
            if why:
                lost += 1
                reasons[why] += 1
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=httpx.Limits(max_connections=None)) as c:
        await asyncio.gather(*(worker(c) for _ in range(concurrency)))
    wall = time.perf_counter() - start
    return {"load_requests": requests, "load_concurrency": concurrency, "lost_requests": lost, "lost_reasons": dict(reasons.most_common(5)),
            "load_requests_per_s": round(requests / wall, 1), "load_p99_s": round(p99(latencies), 4)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=32, help="tokens of each fairness request")
    p.add_argument("--max-running", type=int, default=4, help="serve.max_running of the fairness server")
    p.add_argument("--heavy-clients", type=int, default=128, help="the flooding tenant's requests always outstanding")
    p.add_argument("--flood-s", type=float, default=20.0, help="seconds of the flood in each fairness run")
    p.add_argument("--sessions", type=int, default=16)
    p.add_argument("--agent-s", type=float, default=30.0)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--parts", default="fairness,agents,load", help="which parts to run (comma-separated)")
    args = p.parse_args()
    out: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "load_average": os.getloadavg()[0]}}
    parts = set(args.parts.split(","))
    if "fairness" in parts:
        out.update(fairness(args))
    served = Served("scripted")
    try:
        if "agents" in parts:
            out.update(asyncio.run(agent_runs(served.url, args.sessions, args.agent_s)))
        if "load" in parts:
            out.update(asyncio.run(load(served.url, args.requests, args.concurrency)))
    finally:
        served.close()
    out["machine"]["load_average_end"] = os.getloadavg()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
