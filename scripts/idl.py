#!/usr/bin/env python3
"""Generate the programs' Anchor IDL (idl/<program>.json) on the host, without the anchor CLI.

With the ``idl-build`` feature, Anchor's macros add test functions to the program crate that print
the IDL in pieces between ``--- IDL begin <kind> ---`` / ``--- IDL end <kind> ---`` markers
(program, address, errors, constants, events). This builds those tests with cargo, runs them
and assembles the pieces the way ``anchor idl build`` does (anchor-lang-idl's ``build``): the
program section gets the address, errors, constants and events, types are merged by name,
module paths are shortened to bare names where that is unambiguous, and instructions, accounts,
types, events and constants are sorted by name. The output is written like Anchor writes it
(2-space JSON).

    python3 scripts/idl.py            # write idl/*.json
    python3 scripts/idl.py --check    # fail if the committed files differ (stale IDL)

The anchor CLI itself is not used: it is a large build, and its ``idl build`` changes RUSTFLAGS,
which would rebuild the whole dependency tree in the shared target directory.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = {
    "psyche_coordinator": "psyche-coordinator",
    "psyche_authorizer": "psyche-authorizer",
    "psyche_treasurer": "psyche-treasurer",
    "psyche_mining_pool": "psyche-mining-pool",
}
SECTION = re.compile(r"^--- IDL (begin|end) (\w+) ---$")


def build_print_tests(packages: list[str]) -> dict[str, str]:
    """Build the library tests of ``packages`` with ``idl-build`` in one cargo invocation and
    return each package's test executable. One invocation, so every run resolves the same
    features: built one package at a time, each resolved its dependencies' features anew and
    rebuilt what the previous one had built (about 11 s a package on every run)."""
    env = dict(os.environ)
    # the directory scripts/idl.sh gives it (run directly, the same one)
    env.setdefault("CARGO_TARGET_DIR", str(Path.home() / ".cache/psyche/cargo-target/idl-build"))
    cmd = ["cargo", "test", "--quiet", "--no-run", "--message-format=json", "--lib"]
    for package in packages:
        cmd += ["-p", package]
    cmd += ["--features", ",".join(f"{p}/idl-build" for p in packages)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"IDL build failed: {' '.join(cmd)}")
    found = {}
    for line in proc.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
            name = msg["target"]["name"].replace("_", "-")
            if name in packages and "lib" in msg["target"]["kind"]:
                found[name] = msg["executable"]
    missing = sorted(set(packages) - set(found))
    if missing:
        raise SystemExit(f"IDL build: no test executable for {', '.join(missing)}")
    return found


def run_print_tests(package: str, executable: str) -> str:
    cmd = [executable, "__anchor_private_print_idl", "--show-output", "--test-threads=1"]
    # cargo runs a crate's tests from the crate's directory
    proc = subprocess.run(cmd, cwd=ROOT / "programs" / package, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"IDL print tests of {package} failed: {' '.join(cmd)}")
    return proc.stdout


def parse_sections(stdout: str) -> dict[str, list[object]]:
    sections: dict[str, list[object]] = {}
    kind: str | None = None
    lines: list[str] = []
    for line in stdout.splitlines():
        m = SECTION.match(line)
        if m and m.group(1) == "begin":
            kind, lines = m.group(2), []
        elif m and m.group(1) == "end":
            text = "\n".join(lines)
            # The address section prints a quoted, escaped string; keep its base58 characters
            # (what anchor-lang-idl does too).
            value = re.sub(r"[^0-9A-Za-z]", "", text) if kind == "address" else json.loads(text)
            sections.setdefault(m.group(2), []).append(value)
            kind = None
        elif kind is not None:
            lines.append(line)
    return sections


def shorten_paths(idl: dict) -> dict:
    """``"a::b::Name"`` → ``"Name"`` wherever no other path ends in the same name."""
    text = json.dumps(idl)
    for path in sorted(set(re.findall(r'"((?:\w+::)+(\w+))"', text))):
        full, name = path
        if full not in text:
            continue
        replaced = text.replace(f'"{full}"', f'"{name}"')
        if not re.search(rf'"(?:\w+::)+{re.escape(name)}"', replaced):
            text = replaced
    return json.loads(text)


def assemble(sections: dict[str, list[object]]) -> dict:
    (program,) = sections["program"]
    assert isinstance(program, dict)
    types = {t["name"]: t for ev in sections.get("event", []) for t in ev["types"]}  # type: ignore[index]
    types.update({t["name"]: t for t in program.get("types", [])})
    errors = sections.get("errors", [[]])
    if len(errors) > 1:
        raise SystemExit("more than one #[error_code] enum in a program")
    idl = {
        "address": (sections.get("address") or [""])[0],
        "metadata": program["metadata"],
        "docs": program.get("docs", []),
        "instructions": program["instructions"],
        "accounts": program.get("accounts", []),
        "events": [ev["event"] for ev in sections.get("event", [])],  # type: ignore[index]
        "errors": errors[0],
        "types": list(types.values()),
        "constants": sections.get("const", []),
    }
    idl = shorten_paths(idl)
    for key in ("accounts", "constants", "events", "instructions", "types"):
        idl[key].sort(key=lambda item: item["name"])
    # Anchor omits empty optional lists.
    return {k: v for k, v in idl.items() if v != [] or k == "instructions"}


def render(program: str, executable: str) -> str:
    idl = assemble(parse_sections(run_print_tests(PROGRAMS[program], executable)))
    return json.dumps(idl, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument(
        "--program", action="append", choices=sorted(PROGRAMS), help="only these (default: all)"
    )
    args = parser.parse_args()
    stale = []
    programs = args.program or list(PROGRAMS)
    executables = build_print_tests([PROGRAMS[p] for p in programs])
    for program in programs:
        path = ROOT / "idl" / f"{program}.json"
        text = render(program, executables[PROGRAMS[program]])
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(ROOT)))
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        names = ", ".join(stale)
        raise SystemExit(f"stale IDL: {names}; regenerate with scripts/idl.sh and commit")


if __name__ == "__main__":
    main()
