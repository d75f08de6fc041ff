"""Which program instructions a Solana testnet's transactions ran, from the chain's own records.

The clients' event logs name every transaction they had confirmed (``transaction`` events with
the signature); the run creator's commands print theirs. Each signature is looked up with
``getTransaction`` and its log messages are read the way an explorer does: ``Program <id> invoke
[n]`` opens a program's frame, Anchor's ``Program log: Instruction: <Name>`` names what that
program executed, and ``Program <id> consumed <u> of <limit> compute units`` is the SBF VM's
metering. The tally shows that the joins, ticks, witnesses, warmup witnesses, health checks and
checkpoints were executed by the programs on the chain (not just accepted by an RPC front).
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

__all__ = ["SIGNATURE", "instructions_in_logs", "tally_program_calls"]

SIGNATURE = re.compile(r"\b[1-9A-HJ-NP-Za-km-z]{86,88}\b")
"""A base58 transaction signature (64 bytes); public keys (32 bytes) are at most 44 characters."""

_INVOKE = re.compile(r"^Program (\w+) invoke \[\d+\]$")
_CONSUMED = re.compile(r"^Program (\w+) consumed (\d+) of \d+ compute units$")
_EXIT = re.compile(r"^Program (\w+) (success|failed.*)$")
_INSTRUCTION = "Program log: Instruction: "


def instructions_in_logs(logs: Iterable[str]) -> list[tuple[str, str, int | None]]:
    """(program id, instruction name, compute units) for each Anchor instruction in ``logs``."""
    stack: list[list[Any]] = []  # [program id, instruction name, units]
    out: list[tuple[str, str, int | None]] = []
    for line in logs:
        if m := _INVOKE.match(line):
            stack.append([m.group(1), None, None])
        elif line.startswith(_INSTRUCTION) and stack:
            stack[-1][1] = line[len(_INSTRUCTION) :]
        elif (m := _CONSUMED.match(line)) and stack and stack[-1][0] == m.group(1):
            stack[-1][2] = int(m.group(2))
        elif (m := _EXIT.match(line)) and stack and stack[-1][0] == m.group(1):
            program, name, units = stack.pop()
            if name is not None:
                out.append((program, name, units))
    return out


def tally_program_calls(
    rpc_url: str, signatures: Iterable[str], programs: Mapping[str, str]
) -> dict[str, Any]:
    """Look every signature up and count the instructions of ``programs`` (name → id) it ran.

    ``calls[program][Instruction]`` counts successful transactions' instructions;
    ``compute_units`` has the median units each instruction consumed."""
    names = {pid: name for name, pid in programs.items()}
    calls: dict[str, dict[str, int]] = {name: defaultdict(int) for name in programs}
    units: dict[str, dict[str, list[int]]] = {name: defaultdict(list) for name in programs}
    looked_up = failed = missing = 0
    with httpx.Client(timeout=10) as http:
        for n, sig in enumerate(dict.fromkeys(signatures)):
            body = {
                "jsonrpc": "2.0",
                "id": n,
                "method": "getTransaction",
                "params": [sig, {"encoding": "json", "commitment": "confirmed"}],
            }
            tx = http.post(rpc_url, json=body).json().get("result")
            looked_up += 1
            if tx is None:
                missing += 1
                continue
            meta = tx.get("meta") or {}
            if meta.get("err") is not None:
                failed += 1
                continue
            for program, name, used in instructions_in_logs(meta.get("logMessages") or []):
                if program in names:
                    calls[names[program]][name] += 1
                    if used is not None:
                        units[names[program]][name].append(used)
    return {
        "transactions": looked_up,
        "failed": failed,
        "not_found": missing,
        "calls": {p: dict(sorted(c.items())) for p, c in calls.items()},
        "compute_units": {
            p: {i: int(statistics.median(u)) for i, u in sorted(us.items())}
            for p, us in units.items()
        },
    }
