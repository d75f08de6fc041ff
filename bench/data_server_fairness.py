"""Data server fairness: an honest client's latency alone and beside an abusive reader.

Method. A ``psyche data serve`` process serves a synthetic token file (``--samples`` samples of
``--seq-len`` u16 tokens, seeded shuffle) on 127.0.0.1. The honest client is this process: one
:class:`TcpDataProvider` asking for ``--honest-samples`` samples at a random position,
``--requests`` times in a row (10 ms apart). It does so twice:

1. alone;
2. while an abusive reader runs: a second process (this script with ``--abuse``) connecting from
   another address (127.0.0.2, so source-address fairness sees another host). It asks only for
   the largest request the server serves (before the cap: what fits the client's 64 MiB response
   frame, 8191 samples of 2048 tokens; with it: ``max_request_samples``, 512 such samples) in
   ``--connections`` threads that each connect, authenticate with a fresh key, send one such
   request and hang up without reading the answer, in a loop, and ``--greedy`` threads that each
   keep one connection and read every answer before asking again.

Figures: the honest latency p50/p99 in both phases and their ratio (beside abuse / alone), the
server's RSS after the honest phase and its peak RSS (``VmHWM``), how many requests the abuser
sent, and the server's own counters from its shutdown line (served, abandoned, chunks read;
the code before the fix has no such line). Run it against another checkout by putting that
checkout's ``client`` first on ``PYTHONPATH``: the server is started with this interpreter and
inherits it.

    .venv/bin/python bench/data_server_fairness.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from psyche.data import server_messages as wire
from psyche.data.prepare import write_data_toml
from psyche.data.provider import DataError
from psyche.data.server_messages import MAX_RESPONSE_FRAME
from psyche.data.tcp_client import TcpDataProvider
from psyche.net.errors import FrameError
from psyche.net.framing import encode_frame, recv_frame
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import SecretKey
from psyche.protocol.locations import TokenSize


def largest_request(seq_len: int) -> int:
    """Samples in the largest request the server under test serves."""
    cap = getattr(wire, "max_request_samples", None)
    if cap is not None:
        return int(cap(seq_len))
    return max(1, (MAX_RESPONSE_FRAME - 1024) // (4 * seq_len))


def _authenticate(sock: socket.socket, key: SecretKey) -> wire.Ready:
    challenge = wire.decode_server(recv_frame(sock, MAX_RESPONSE_FRAME))
    assert isinstance(challenge, wire.Challenge)
    signature = key.sign(wire.auth_message(challenge.nonce))
    sock.sendall(encode_frame(wire.encode(wire.ChallengeResponse(key.public_key(), signature))))
    ready = wire.decode_server(recv_frame(sock, MAX_RESPONSE_FRAME))
    assert isinstance(ready, wire.Ready)
    return ready


def _largest(rng: random.Random, ready: wire.Ready) -> bytes:
    n = largest_request(ready.seq_len)
    start = rng.randrange(ready.num_samples)
    request = wire.RequestTrainingData(wire.WireBatchId(start, start + n - 1))
    return encode_frame(wire.encode(request))


def abuse(
    port: int,
    source: str,
    hangups: int,
    greedy: int,
    stop: threading.Event,
    started: threading.Event,
) -> tuple[int, int]:
    """Until ``stop``: ``hangups`` loops that connect, authenticate, ask for the most and hang
    up, and ``greedy`` loops that ask for the most on one connection and read every answer. Sets
    ``started`` after the first request. Returns the requests sent by each kind of loop."""
    sent = [0] * (hangups + greedy)

    def connect() -> socket.socket:
        return socket.create_connection(("127.0.0.1", port), timeout=60, source_address=(source, 0))

    def hangup(i: int) -> None:
        rng = random.Random(i)
        while not stop.is_set():
            try:
                with connect() as sock:
                    sock.sendall(
                        _largest(rng, _authenticate(sock, SecretKey.from_bytes(rng.randbytes(32))))
                    )
                sent[i] += 1
                started.set()
            except (OSError, DataError, FrameError):
                stop.wait(0.01)  # refused or reset: the server is shedding us; try again

    def read_all(i: int) -> None:
        rng = random.Random(i)
        while not stop.is_set():
            try:
                with connect() as sock:
                    ready = _authenticate(sock, SecretKey.from_bytes(rng.randbytes(32)))
                    while not stop.is_set():
                        sock.sendall(_largest(rng, ready))
                        sent[i] += 1
                        started.set()
                        recv_frame(sock, MAX_RESPONSE_FRAME)
            except (OSError, DataError, FrameError):
                stop.wait(0.01)

    threads = [threading.Thread(target=hangup, args=(i,)) for i in range(hangups)]
    threads += [
        threading.Thread(target=read_all, args=(i,)) for i in range(hangups, hangups + greedy)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(sent[:hangups]), sum(sent[hangups:])


def parse_sent(text: str) -> dict[str, int]:
    """The abuser's last line, ``hangup=N greedy=M``, as a dict (empty if it printed none)."""
    lines = text.strip().splitlines()
    fields = (part.partition("=") for part in (lines[-1].split() if lines else []))
    return {name: int(value) for name, _, value in fields if value.isdigit()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_data(directory: Path, seq_len: int, samples: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tokens = (np.arange(samples * seq_len, dtype=np.int64) % 50_021).astype("<u2")
    np.save(directory / "tokens.npy", tokens, allow_pickle=False)
    toml = directory / "data.toml"
    write_data_toml(toml, TokenSize.TwoBytes, seq_len, bytes(range(32)))
    return toml


def start_server(toml: Path, port: int, log: Path, memory_gib: float) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "psyche.cli.main", "data", "serve"]
    cmd += ["--data-config", str(toml), "--port", str(port), "--host", "127.0.0.1"]
    # Wide enough that the log handler never wraps the counters line.
    env = {**os.environ, "COLUMNS": "400"}
    limit = int(memory_gib * 2**30)

    def cap_memory() -> None:
        # The server before the fix grew without bound under this load (19 GB in one try, until
        # the kernel's OOM killer stepped in); a cap on its address space keeps the machine safe.
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    with log.open("wb") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=cap_memory
        )


def memory_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (peak RSS) of a live process, in KiB (0 once it has died)."""
    fields = {"VmRSS": 0, "VmHWM": 0}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


def server_counters(log_text: str) -> dict[str, int]:
    """Counters from the server's shutdown line (empty for a server that prints none)."""
    match = re.search(r"data server stopped: ([^;\n]*)", log_text)
    if match is None:
        return {}
    counters = {}
    for part in match.group(1).split(","):
        value, _, name = part.strip().partition(" ")
        if value.isdigit():
            counters[name] = int(value)
    return counters


def honest_latencies(
    client: TcpDataProvider, samples: int, requests: int, num_samples: int, seed: int
) -> tuple[list[float], int]:
    """Seconds per request, and how many failed (a failure counts as an infinite latency)."""
    rng = random.Random(seed)
    latencies: list[float] = []
    failed = 0
    for _ in range(requests):
        start = rng.randrange(num_samples)
        t0 = time.perf_counter()
        try:
            client.get_samples(BatchId(start, start + samples - 1))
            latencies.append(time.perf_counter() - t0)
        except Exception:
            failed += 1
            latencies.append(float("inf"))
        time.sleep(0.01)
    return latencies, failed


def percentile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        toml = make_data(Path(tmp) / "data", args.seq_len, args.samples)
        port = free_port()
        log = Path(tmp) / "server.log"
        server = start_server(toml, port, log, args.server_memory_gib)
        abuser: subprocess.Popen[bytes] | None = None
        try:
            key = SecretKey.from_bytes(b"\x07" * 32)
            with TcpDataProvider(
                f"127.0.0.1:{port}", key, args.seq_len, retries=8, backoff=0.25
            ) as starting:
                num_samples = starting.num_samples  # waits for the server to listen
            client = TcpDataProvider(
                f"127.0.0.1:{port}", key, args.seq_len, timeout=args.timeout, retries=0
            )
            alone, alone_failed = honest_latencies(
                client, args.honest_samples, args.requests, num_samples, 1
            )
            rss_after_honest = memory_kib(server.pid)["VmRSS"]
            sampling = threading.Event()
            sampled: list[int] = [0]

            def sample_rss() -> None:
                # VmHWM is read at the end; sampling as well keeps a figure if the server dies.
                while not sampling.wait(0.2):
                    sampled[0] = max(sampled[0], memory_kib(server.pid)["VmRSS"])

            sampler = threading.Thread(target=sample_rss, daemon=True)
            sampler.start()
            cmd = [sys.executable, __file__, "--abuse", str(port)]
            cmd += ["--connections", str(args.connections), "--greedy", str(args.greedy)]
            cmd += ["--abuse-seconds", str(args.abuse_seconds)]
            abuser = subprocess.Popen(cmd, stdout=subprocess.PIPE)
            assert abuser.stdout is not None
            if abuser.stdout.readline().strip() != b"started":
                raise RuntimeError("the abuser did not start")
            time.sleep(args.warmup)
            beside, beside_failed = honest_latencies(
                client, args.honest_samples, args.requests, num_samples, 2
            )
            client.close()
            memory = memory_kib(server.pid)
            alive = server.poll() is None
            sampling.set()
            sampler.join()
            abuser.send_signal(signal.SIGTERM)
            out, _ = abuser.communicate(timeout=60)
            sent = parse_sent(out.decode())
        finally:
            if abuser is not None and abuser.poll() is None:
                abuser.kill()
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        log_text = log.read_text(errors="replace")
        if args.keep_log is not None:
            args.keep_log.write_text(log_text)
        counters = server_counters(log_text)
    p50a, p99a = percentile(alone, 0.5), percentile(alone, 0.99)
    p50b, p99b = percentile(beside, 0.5), percentile(beside, 0.99)
    return {
        "seq_len": args.seq_len,
        "honest_samples": args.honest_samples,
        "abusive_request_samples": largest_request(args.seq_len),
        "requests": args.requests,
        "alone_p50_ms": p50a * 1e3,
        "alone_p99_ms": p99a * 1e3,
        "abused_p50_ms": p50b * 1e3,
        "abused_p99_ms": p99b * 1e3,
        "ratio_p50": p50b / p50a,
        "ratio_p99": p99b / p99a,
        "honest_failed": alone_failed + beside_failed,
        "server_rss_after_honest_mib": rss_after_honest / 1024,
        "server_rss_end_mib": memory["VmRSS"] / 1024,
        "server_peak_rss_mib": max(memory["VmHWM"], sampled[0]) / 1024,
        "server_alive_at_end": alive,
        "abusive_requests_sent": sent,
        "server_counters": counters,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=4096, help="samples in the data file")
    parser.add_argument("--honest-samples", type=int, default=16)
    parser.add_argument("--requests", type=int, default=40, help="honest requests per phase")
    parser.add_argument("--connections", type=int, default=4, help="abusive hang-up loops")
    parser.add_argument("--greedy", type=int, default=2, help="abusive loops reading answers")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of abuse first")
    parser.add_argument("--timeout", type=float, default=120.0, help="honest per-request limit")
    parser.add_argument("--abuse-seconds", type=float, default=600.0)
    parser.add_argument(
        "--server-memory-gib", type=float, default=8.0, help="address-space cap of the server"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--keep-log", type=Path, help="copy the server's log here")
    parser.add_argument("--abuse", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--source", default="127.0.0.2", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.abuse is not None:
        stop, started = threading.Event(), threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        timer = threading.Timer(args.abuse_seconds, stop.set)
        timer.daemon = True
        timer.start()
        # The parent waits for this line before it measures.
        threading.Thread(
            target=lambda: started.wait() and print("started", flush=True), daemon=True
        ).start()
        hung_up, greedy = abuse(
            args.abuse, args.source, args.connections, args.greedy, stop, started
        )
        print(f"hangup={hung_up} greedy={greedy}", flush=True)
        return
    figures = run(args)
    for name, value in figures.items():
        print(f"{name:32} {value:.2f}" if isinstance(value, float) else f"{name:32} {value}")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
