"""``python -m psyche.p2p.host``: the command line :class:`psyche.p2p.process.HostProcess` runs."""

from psyche.p2p.host.main import main

if __name__ == "__main__":
    raise SystemExit(main())
