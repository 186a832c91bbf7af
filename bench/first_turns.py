"""Where the event loop stalls on a fresh server's first turns (`python -m bench.first_turns CONFIG`).

Starts the gateway of CONFIG in this process (uvicorn, role `all`, as `gateway serve` does), waits for
/readyz, then sends `--burst` web chat messages at once, twice (the first turns, then later turns). A
ticker task on the loop stamps the time every 5 ms; a watchdog thread samples the loop thread's stack
every 10 ms while the stamp is older than `--stall-ms`, so each stall is told with the frames that held
the loop. Prints, per phase: the longest stall, the total time stalled, the replies' latencies, how
many `ratelimit.unavailable` lines were logged, and the functions most often on top of a stalled loop.
The config's index must already be ingested (`gateway ingest --config CONFIG`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import logging
import os
import statistics
import sys
import threading
import time
import traceback

import httpx


class Watchdog(threading.Thread):
    """Samples the loop thread's stack while the loop's last tick is older than `stall_s`."""

    def __init__(self, loop_thread: int, stall_s: float) -> None:
        super().__init__(daemon=True)
        self.loop_thread, self.stall_s = loop_thread, stall_s
        self.tick = time.perf_counter()
        self.samples: collections.Counter[str] = collections.Counter()
        self.stalls: list[float] = []  # seconds, one per stall
        self.done = threading.Event()

    def run(self) -> None:
        started = None
        while not self.done.wait(0.01):
            late = time.perf_counter() - self.tick
            if late < self.stall_s:
                if started is not None:
                    self.stalls.append(time.perf_counter() - started)
                    started = None
                continue
            started = started or self.tick
            frame = sys._current_frames().get(self.loop_thread)
            if frame is not None:
                self.samples[_where(frame)] += 1

    def take(self) -> tuple[list[float], collections.Counter[str]]:
        out = self.stalls, self.samples
        self.stalls, self.samples = [], collections.Counter()
        return out


def _where(frame) -> str:
    """The innermost frames of the project and of the libraries it calls, short."""
    stack = traceback.extract_stack(frame)
    ours = [f for f in stack if "/gateway/" in f.filename or "/rag/" in f.filename or "/channels/" in f.filename]
    top = stack[-1]
    parts = [f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in ours[-2:]]
    return " > ".join(parts + [f"[{top.filename.split('site-packages/')[-1]}:{top.lineno} {top.name}]"])


class CountUnavailable(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "ratelimit.unavailable" in str(record.msg):
            self.count += 1
        if record.name == "asyncio" and "took" in record.getMessage():  # --debug: asyncio's slow callbacks
            text = record.getMessage()
            task = text.split(" coro=<")[-1].split(" wait_for=")[0] if " coro=<" in text else text[:200]
            print(f"   slow callback, {text.rsplit(' took ', 1)[-1]}: {task}", flush=True)


async def main(config: str, port: int, burst: int, stall_ms: float, top: int, debug: bool,
               profile_to: str | None) -> None:
    import uvicorn

    from gateway.app import create_app
    from gateway.settings import load_settings

    dog = Watchdog(threading.get_ident(), stall_ms / 1000)
    dog.start()

    async def ticker() -> None:
        while True:
            dog.tick = time.perf_counter()
            await asyncio.sleep(0.005)

    tick = asyncio.create_task(ticker())
    if debug:
        asyncio.get_running_loop().set_debug(True)
        asyncio.get_running_loop().slow_callback_duration = stall_ms / 1000
    app = create_app(load_settings(config), url=f"http://127.0.0.1:{port}")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False))
    counter = CountUnavailable()
    logging.getLogger().addHandler(counter)
    started = time.perf_counter()
    serving = asyncio.create_task(server.serve())
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        while True:
            try:
                if (await client.get("/readyz")).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
        report("start until ready", time.perf_counter() - started, [], dog, counter, top)
        for phase in ("first turns", "later turns"):
            counter.count = 0
            profile = cProfile.Profile() if profile_to and phase == "first turns" else None
            if profile:  # the loop thread only: cProfile follows the thread that enables it
                profile.enable()
            t0 = time.perf_counter()
            replies = await asyncio.gather(*(client.post("/v1/bots/acme/chat", json={
                "session_id": f"{phase[:5]}-{i}-{time.time_ns()}", "text": "How do I reset my password?"})
                for i in range(burst)))
            if profile:
                profile.disable()
                profile.dump_stats(profile_to)
            took = [r.elapsed.total_seconds() for r in replies]
            assert all(r.status_code == 200 for r in replies), [r.status_code for r in replies]
            report(phase, time.perf_counter() - t0, took, dog, counter, top)
    server.should_exit = True
    await serving
    tick.cancel()
    dog.done.set()


def report(phase: str, wall: float, took: list[float], dog: Watchdog, counter: CountUnavailable, top: int) -> None:
    stalls, samples = dog.take()
    print(f"\n== {phase}: {wall:.2f} s wall; loop stalled {len(stalls)}x, longest {max(stalls, default=0) * 1000:.0f} ms,"
          f" total {sum(stalls) * 1000:.0f} ms; ratelimit.unavailable logged {counter.count}x", flush=True)
    if took:
        print(f"   replies: median {statistics.median(took):.2f} s, max {max(took):.2f} s", flush=True)
    for where, n in samples.most_common(top):
        print(f"   {n * 10:5d} ms  {where}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--burst", type=int, default=10)
    parser.add_argument("--stall-ms", type=float, default=50.0)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--debug", action="store_true", help="asyncio debug mode: print each slow callback")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the loop thread during the first turns")
    args = parser.parse_args()
    asyncio.run(main(args.config, args.port, args.burst, args.stall_ms, args.top, args.debug, args.profile))
