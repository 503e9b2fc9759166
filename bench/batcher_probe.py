"""Probe: when does a request that arrives while the instance is busy join the next batch?

    python -P -m tailpilot.bench.batcher_probe [--trials 20] [--out docs/benchmarks/batcher-probe.md]

A batcher that forms each batch when an instance comes free, from every request queued by then (the
simulator's, before it modelled this), would always put a late request into the next batch.
Triton's dynamic batcher (core `src/dynamic_batch_scheduler.cc`) forms the batch earlier: once the
oldest queued request has waited `max_queue_delay`, its thread moves the queued requests into a
*payload* and hands that to the instance's queue, even while the instance is busy.
A request that arrives after that sits in the scheduler's queue; it reaches the waiting payload only
if the batcher thread looks at the queue again before the instance takes the payload. The arrival
does not wake the batcher (a wake needs as many queued requests as the next preferred size); the
end of the running batch does, and the same instant the instance thread dequeues the payload: a
race between two threads. The simulator (`bench/triton_batcher.py`) draws its winner with the
chance this probe measures.

The probe measures that race on the example engine under the validation's conditions (one Triton
in a 500m CPU slot, preferred batch sizes 4 and 8, a 5 ms queue delay), with three requests per
trial on an otherwise idle server:

* a *blocker*, one request of batch 8, at 0: the instance is busy for `B` ms;
* `early` at 0.2 B: its delay expires at 0.2 B + 5 ms, while the blocker still runs, so the batcher
  forms a payload of it then;
* `late`, half-way between that expiry and B: it arrives after the payload was formed and before
  the instance is free.

Triton's batch statistics for the trial tell the outcome: one execution of batch 2 (`late` joined
the waiting payload) or two of batch 1 (it did not, and waited for the
next batch: about one batch time more). A control series sends `late` before `early`'s delay
expires, where both batchers put the two in one batch, so that the probe is seen to tell the cases
apart.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from tailpilot.bench.cpu_slots import CpuSlot
from tailpilot.bench.loadgen import Payload, binary_infer_body
from tailpilot.bench.validate import (
    CLIENT_CORE,
    MODEL,
    Variant,
    _build,
    _commit,
    apply_variant,
    confinable_cores,
    server_cores,
)
from tailpilot.builders.example_model import DENSE_HIDDEN, INPUT_NAME, example_inputs
from tailpilot.builders.triton_server import TritonServer
from tailpilot.controllers.signals.pod_signals import parse_batch_stats

#: The validation's batcher with a queue delay (`validate.VARIANTS`).
DELAY_VARIANT = Variant("preferred-4-8-delay-5ms", (4, 8), 5000)
BLOCKER_BATCH = 8
#: A trial's requests must be sent within this of their times, or the trial is not counted.
MAX_SEND_MISS_MS = 1.0


@dataclass(frozen=True)
class Plan:
    """Send times of one trial's requests, in ms after the trial's start."""

    early_ms: float
    late_ms: float


def plan(*, blocker_ms: float, delay_ms: float, late_before_expiry: bool) -> Plan:
    """Where `early` and `late` go for a blocker that keeps the instance busy `blocker_ms` (pure).

    Raises:
        ValueError: When the blocker is too short to fit the delay and a gap on either side.
    """
    early = 0.2 * blocker_ms
    expiry = early + delay_ms
    if expiry + 2.0 >= blocker_ms:
        raise ValueError(f"a {blocker_ms:.1f} ms blocker is too short for a {delay_ms:g} ms queue delay")
    late = early + delay_ms / 2 if late_before_expiry else (expiry + blocker_ms) / 2
    return Plan(early_ms=early, late_ms=late)


def outcome(batches: Mapping[int, int]) -> str:
    """`joined`, `separate` or `other`, from the trial's executions per batch size (pure)."""
    rest = {size: n for size, n in batches.items() if n and size != BLOCKER_BATCH}
    if rest == {2: 1}:
        return "joined"
    if rest == {1: 2}:
        return "separate"
    return "other"


@dataclass(frozen=True)
class Trial:
    """One trial's outcome and how well its requests kept their send times."""

    plan: Plan
    outcome: str
    #: Latency of `late` (ms).
    late_latency_ms: float
    #: The largest gap between a request's planned and real send time (ms).
    send_miss_ms: float


def _batch_counts(http_url: str) -> dict[int, int]:
    """Executions per batch size so far, read as the operator reads them (`parse_batch_stats`)."""
    stats = parse_batch_stats(
        httpx.get(f"{http_url}/v2/models/{MODEL}/stats", timeout=10).json(), model=MODEL
    )
    return {size: figures.executions for size, figures in (stats or {}).items()}


def _send_at(
    clients: Sequence[httpx.Client], url: str, bodies: Sequence[Payload], offsets_ms: Sequence[float]
) -> list[tuple[float, float]]:
    """Send body i at offsets_ms[i] after a common start, each from its own thread and connection.

    Returns (sent, done) of each request in ms after the start. A thread sleeps until 2 ms before its
    time and spins the rest, so that the send times hold to a fraction of a millisecond.
    """
    times: list[tuple[float, float]] = [(0.0, 0.0)] * len(bodies)
    start = time.perf_counter() + 0.05

    def go(i: int) -> None:
        due = start + offsets_ms[i] / 1000.0
        time.sleep(max(0.0, due - time.perf_counter() - 0.002))
        while time.perf_counter() < due:
            pass
        sent = time.perf_counter()
        clients[i].post(url, content=bodies[i].body, headers=bodies[i].headers).raise_for_status()
        times[i] = ((sent - start) * 1000.0, (time.perf_counter() - start) * 1000.0)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return times


def run_trials(http_url: str, *, trials: int, late_before_expiry: bool, blocker_ms: float) -> list[Trial]:
    url = f"{http_url}/v2/models/{MODEL}/infer"
    blocker = binary_infer_body(inputs=[(INPUT_NAME, example_inputs(BLOCKER_BATCH))])
    single = binary_infer_body(inputs=[(INPUT_NAME, example_inputs(1))])
    p = plan(
        blocker_ms=blocker_ms, delay_ms=DELAY_VARIANT.delay_us / 1000.0, late_before_expiry=late_before_expiry
    )
    offsets = [0.0, p.early_ms, p.late_ms]
    out: list[Trial] = []
    with httpx.Client(timeout=30) as c0, httpx.Client(timeout=30) as c1, httpx.Client(timeout=30) as c2:
        clients = [c0, c1, c2]
        for c in clients:  # open the keep-alive connections before timing anything
            c.post(url, content=single.body, headers=single.headers).raise_for_status()
        for _ in range(trials):
            before = _batch_counts(http_url)
            times = _send_at(clients, url, [blocker, single, single], offsets)
            after = _batch_counts(http_url)
            delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
            out.append(
                Trial(
                    plan=p,
                    outcome=outcome(delta),
                    late_latency_ms=times[2][1] - times[2][0],
                    send_miss_ms=max(abs(sent - off) for (sent, _), off in zip(times, offsets, strict=True)),
                )
            )
            time.sleep(0.2)  # the server idle again before the next trial
    return out


def measure_blocker_ms(http_url: str, *, runs: int = 5) -> float:
    """Median time the blocker alone takes, end to end (ms)."""
    url = f"{http_url}/v2/models/{MODEL}/infer"
    blocker = binary_infer_body(inputs=[(INPUT_NAME, example_inputs(BLOCKER_BATCH))])
    took: list[float] = []
    with httpx.Client(timeout=30) as client:
        client.post(url, content=blocker.body, headers=blocker.headers).raise_for_status()
        for _ in range(runs):
            t = time.perf_counter()
            client.post(url, content=blocker.body, headers=blocker.headers).raise_for_status()
            took.append((time.perf_counter() - t) * 1000.0)
            time.sleep(0.05)
    return statistics.median(took)


@dataclass(frozen=True)
class Summary:
    """A series of trials: outcomes among those sent on time, and `late`'s median latency per outcome."""

    trials: int
    on_time: int
    joined: int
    separate: int
    other: int
    late_joined_ms: float | None
    late_separate_ms: float | None


def summarize(trials: Sequence[Trial]) -> Summary:
    """Pure: only trials whose requests kept their send times count."""
    kept = [t for t in trials if t.send_miss_ms <= MAX_SEND_MISS_MS]

    def median_late(kind: str) -> float | None:
        values = [t.late_latency_ms for t in kept if t.outcome == kind]
        return statistics.median(values) if values else None

    return Summary(
        trials=len(trials),
        on_time=len(kept),
        joined=sum(t.outcome == "joined" for t in kept),
        separate=sum(t.outcome == "separate" for t in kept),
        other=sum(t.outcome == "other" for t in kept),
        late_joined_ms=median_late("joined"),
        late_separate_ms=median_late("separate"),
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def render(*, blocker_ms: float, series: Mapping[str, Sequence[Trial]], command: str) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Triton's dynamic batcher: does a late request join the waiting batch?",
        "",
        "<!-- Generated by `make bench-batcher-probe` (bench/batcher_probe.py);"
        " edit the generator, not this page. -->",
        "",
        f"Command: `{command}`, run {now} at commit {_commit()}, {os.cpu_count()} CPUs.",
        "",
        "One Triton 2.51 serving the dense example engine in a 500m CPU slot, batching preferred 4",
        f"and 8 with a 5 ms queue delay. Per trial: a blocker of batch {BLOCKER_BATCH} at 0 (alone it",
        f"takes {blocker_ms:.1f} ms, median of 5), `early` and `late` single requests at the times below.",
        f"A trial counts when every request was sent within {MAX_SEND_MISS_MS:g} ms of its time.",
        "Outcome from Triton's batch statistics: *joined* = one batch of 2, *separate* = two batches of 1.",
        "",
        "| series | early at (ms) | late at (ms) | trials on time | joined | separate | other |"
        " late's median latency joined / separate (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, trials in series.items():
        s = summarize(trials)
        p = trials[0].plan
        lines.append(
            f"| {name} | {p.early_ms:.1f} | {p.late_ms:.1f} | {s.on_time} of {s.trials} | {s.joined} "
            f"| {s.separate} | {s.other} | {_ms(s.late_joined_ms)} / {_ms(s.late_separate_ms)} |"
        )
    lines += [
        "",
        "In the *after expiry* series `late` arrives once the batcher has already formed a payload of",
        "`early` and before the instance is free. A batcher that formed batches when the instance comes",
        "free would put it into that batch every time; Triton does so only when its batcher thread, woken",
        "by the end of the blocker, looks at the queue before the instance thread takes the payload. When",
        "it loses, `late` waits for a batch of its own after `early`'s: about one more batch time. The",
        "simulator (`bench/triton_batcher.py`) draws that race with the chance measured here. The *before",
        "expiry* series is the control: `late` joins `early` whoever wins.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -P -m tailpilot.bench.batcher_probe")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--server-millis", type=int, default=500)
    ap.add_argument("--period-us", type=int, default=10_000)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    # A SIGTERM must run the `finally` below too: it stops the server this probe started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cpus = confinable_cores("the probe")
    client = CpuSlot(f"{os.getpid()}-probe-client", frozenset({CLIENT_CORE})).create()
    client.join()
    (cores,) = server_cores(cpus, servers=1, millis=args.server_millis)
    slot = CpuSlot(f"{os.getpid()}-probe-server", cores, args.server_millis, args.period_us).create()
    with tempfile.TemporaryDirectory(prefix="tailpilot-batcher-probe-") as tmp:
        _engine, repo = _build(Path(tmp), DENSE_HIDDEN)
        server = TritonServer(
            repo,
            ready_timeout_s=120,
            env={"OMP_NUM_THREADS": "1"},
            explicit_models=[MODEL],
            preexec=slot.join,
        )
        server.start()
        try:
            apply_variant([server], repo, DELAY_VARIANT)
            blocker_ms = measure_blocker_ms(server.http_url)
            series = {
                "after expiry": run_trials(
                    server.http_url, trials=args.trials, late_before_expiry=False, blocker_ms=blocker_ms
                ),
                "before expiry (control)": run_trials(
                    server.http_url, trials=args.trials, late_before_expiry=True, blocker_ms=blocker_ms
                ),
            }
        finally:
            server.stop()
    command = "python -P -m tailpilot.bench.batcher_probe" + (f" --out {args.out}" if args.out else "")
    text = render(blocker_ms=blocker_ms, series=series, command=command)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
