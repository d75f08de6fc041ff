"""The Solana local testnet: a local SVM with both programs, the run creator's flow, N joiners.

What a real deployment does, in its own processes, on 127.0.0.1:

1. the chain: ``psyche-local-svm run`` (an SVM behind an RPC front: JSON-RPC + websocket pubsub
   in front of ``solders.litesvm`` running ``target/deploy/*.so`` with a validator's rules), its
   own process like a validator, with the run creator's, the grantor's, the grantee's and every
   client's wallet funded;
2. the run creator's flow, exactly as the user documentation writes it: ``psyche-solana-client
   create-run``, ``update-config``, ``scripts/join-authorization-create.sh``,
   ``scripts/join-authorization-set-delegates.sh`` (the delegates are the clients' wallets) and
   ``set-paused … resume``, each a subprocess with its output in ``logs/setup.log``;
3. N joiners: ``psyche-solana-client train`` configured only by an env file written as a joiner
   writes one (``env/client-N.env``, quoted values) and read as ``docker run --env-file`` reads
   it. The clients send every join, tick, witness, warmup witness, health check and checkpoint
   as transactions the SBF program executes; the clients tick (as on a real cluster, nobody else
   does: see :mod:`psyche.backends.solana.ticker`).

Peers: each client writes its P2P addresses to its peer record on the chain and reads the
others' (:mod:`psyche.backends.solana.discovery`); nobody hands out addresses. ``bootstrap_peers``
also passes the others' multiaddrs (``PSYCHE_BOOTSTRAP_PEERS``), as an operator could.
``internet`` runs each client in its own network namespace of an emulated internet (some behind
NAT, shaped links), with the local SVM on that internet's gateway.

The run's states come from the coordinator account (:class:`~psyche.testnet.chain.ChainFollower`),
written in the centralized server's event format, so the summary, the per-round lines and the
plot are the centralized testnet's. At the end, before the SVM stops, every confirmed transaction
of the run is looked up on it and ``program-calls.json`` tallies the instructions the programs
executed (:mod:`psyche.testnet.program_calls`).

This module holds the launcher (:class:`SolanaTestnet`: the chain, the run creator's flow, the
joiners' env files and processes); its options are in :mod:`psyche.testnet.solana_options`, the
programs and the faucet in :mod:`psyche.testnet.solana_chain`, how a process is started in
:mod:`psyche.testnet.processes`.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from solders.keypair import Keypair

from psyche.events import TransactionEvent, read_events
from psyche.p2p.peer_id import peer_id_for
from psyche.protocol.locations import ServerData
from psyche.protocol.model import LLM
from psyche.protocol.run_file import load_run_config
from psyche.testnet.base import LocalTestnet, Proc
from psyche.testnet.chain import ChainFollower
from psyche.testnet.envfile import read_env_file, write_env_file
from psyche.testnet.failures import ChildFailed, error_line
from psyche.testnet.inputs import prepare_local_inputs, state_with_checkpoint
from psyche.testnet.internet import EmulatedInternet
from psyche.testnet.processes import console_script, container_env, free_port
from psyche.testnet.program_calls import SIGNATURE, tally_program_calls
from psyche.testnet.solana_chain import LAMPORTS, PROGRAMS, ROOT, program_ids, request_airdrop
from psyche.testnet.solana_options import (
    DEFAULT_EARNING_RATE,
    TEST_MINT_DECIMALS,
    SolanaTestnetOptions,
)

__all__ = ["SolanaTestnet", "SolanaTestnetOptions", "make_solana_testnet"]


@dataclass
class SolanaTestnet(LocalTestnet):
    svm: Proc | None = None
    rpc_url: str = ""
    ws_url: str = ""
    follower: ChainFollower | None = None
    p2p_ports: dict[int, int] = field(default_factory=dict)
    setup_signatures: list[str] = field(default_factory=list)
    log_line: Callable[[str], None] = print
    internet: EmulatedInternet | None = None

    @property
    def opts(self) -> SolanaTestnetOptions:
        assert isinstance(self.options, SolanaTestnetOptions)
        return self.options

    @property
    def run_id(self) -> str:
        return self.opts.run_id or self.config.run_id or ""

    @property
    def states_file(self) -> Path:
        return self.out / "chain-events.jsonl"

    @property
    def keys(self) -> Path:
        return self.out / "keys"

    def wallet(self, name: str) -> Keypair:
        """The keypair in ``keys/<name>.json`` (solana-keygen's format), made on first use."""
        path = self.keys / f"{name}.json"
        if path.exists():
            return Keypair.from_bytes(bytes(json.loads(path.read_text())))
        kp = Keypair()
        path.touch(mode=0o600)
        path.write_text(json.dumps(list(bytes(kp))))
        return kp

    # --- the chain ----------------------------------------------------------------------------

    def funded_wallets(self) -> list[Keypair]:
        names = ["creator", "grantor", "grantee"]
        names += [f"delegate{i}" for i in range(1, self.opts.num_clients + 1)]
        names += [f"joiner{i}" for i in range(1, self.opts.joiners + 1)]
        return [self.wallet(n) for n in names]

    def use_chain(self, rpc: str, ws_rpc: str | None) -> None:
        """An existing chain instead of the local SVM: every wallet is funded by the chain's
        faucet (``requestAirdrop``)."""
        from psyche.solana.session import resolve_rpc_url, websocket_url

        self.rpc_url = resolve_rpc_url(rpc)
        self.ws_url = ws_rpc or websocket_url(self.rpc_url)
        self.log_line(f"chain at {self.rpc_url} (websocket {self.ws_url})")
        for kp in self.funded_wallets():
            request_airdrop(self.rpc_url, str(kp.pubkey()), LAMPORTS)

    def start_svm(self) -> None:
        o = self.opts
        if o.rpc:
            self.use_chain(o.rpc, o.ws_rpc)
            return
        if o.validator == "real":
            self.start_real_validator()
            return
        ready = self.out / "svm-ready.json"
        ready.unlink(missing_ok=True)
        funded = self.funded_wallets()
        argv = [console_script("psyche-local-svm"), "run", "--rpc-port", str(o.rpc_port)]
        if self.internet is not None:
            # The gateway is an address of this namespace and the clients' way out of theirs.
            argv += ["--bind", self.internet.host_gateway_address()]
        if o.ws_port:
            argv += ["--ws-port", str(o.ws_port)]
        argv += ["--ready-file", str(ready)]
        for name, program_id in program_ids().items():
            so = ROOT / "target" / "deploy" / f"{name}.so"
            argv += ["--program", f"{program_id}={so}"]
        for kp in funded:
            argv += ["--airdrop", f"{kp.pubkey()}={LAMPORTS}"]
        self.svm = self.spawn("svm", argv)
        deadline = time.monotonic() + 120
        while not ready.exists():
            if self.svm.popen.poll() is not None:
                raise self.svm.failed("the local SVM exited")
            if time.monotonic() > deadline:
                raise RuntimeError("the local SVM was not ready within 120 s")
            time.sleep(0.2)
        urls = json.loads(ready.read_text())
        self.rpc_url, self.ws_url = urls["rpc"], urls["ws"]
        self.log_line(f"local SVM at {self.rpc_url} (websocket {self.ws_url})")

    def start_real_validator(self) -> None:
        """agave's ``solana-test-validator`` with the four programs, as its own process."""
        from psyche.testnet.validator import (
            ValidatorPorts,
            find_validator,
            validator_command,
            wait_until_ready,
        )

        ids = program_ids()
        programs = {ids[n]: ROOT / "target" / "deploy" / f"{n}.so" for n in PROGRAMS}
        ports = ValidatorPorts.pick()
        argv = validator_command(find_validator(), self.out / "ledger", ports, programs)
        self.svm = self.spawn("validator", argv)
        wait_until_ready(ports.rpc_url, list(programs), self.svm.popen)
        self.use_chain(ports.rpc_url, ports.ws_url)

    # --- the run creator ----------------------------------------------------------------------

    def setup(self, what: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
        """Run one step of the run creator's flow; its output goes to ``logs/setup.log``, its
        standard output is returned."""
        self.log_line(f"run creator: {what}")
        log = self.out / "logs" / "setup.log"
        try:
            res = subprocess.run(
                list(argv),
                capture_output=True,
                env=container_env(env or {}),
                timeout=120,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{what} did not finish within 120 s") from None
        output = res.stdout.decode(errors="replace") + res.stderr.decode(errors="replace")
        with log.open("a") as f:
            f.write(f"$ {shlex.join(argv)}\n{output}")
        self.setup_signatures += SIGNATURE.findall(res.stdout.decode(errors="replace"))
        if res.returncode != 0:
            raise ChildFailed(
                f"{what} failed (exit {res.returncode}); see {log}",
                code=res.returncode,
                detail=error_line(res.stderr.decode(errors="replace")) or error_line(output),
            )
        return res.stdout.decode(errors="replace")

    def create_run(self) -> None:
        """The run creator's documented flow, one subprocess per step: create the run (with the
        Treasurer, paying in a fresh test mint), configure it, authorize the clients, set the
        epoch rates, fund the Treasurer's escrow, resume; then say how extra joiners join."""
        o = self.opts
        cli = console_script("psyche-solana-client")
        endpoints = ["--rpc", self.rpc_url, "--ws-rpc", self.ws_url]
        creator = {
            "WALLET_PRIVATE_KEY_PATH": str(self.keys / "creator.json"),
            # The creator (main authority) names the grantor as the run's join authority.
            "JOIN_AUTHORITY": str(self.wallet("grantor").pubkey()),
        }

        def on_run(command: str, *args: str) -> list[str]:
            return [cli, command, *endpoints, "--run-id", self.run_id, *args]

        create_run = on_run("create-run", "--name", o.name)
        # Every client is on this machine (or the emulated LAN): say so, so peer records may
        # name loopback and private addresses (issue 26, finding 5).
        create_run += ["--description", o.description, "--local-run"]
        mint = None
        if o.treasurer:
            mint = self.create_test_mint(cli, endpoints, creator)
            create_run += ["--treasurer-collateral-mint", mint]
            create_run += ["--treasurer-collateral-per-point", str(o.collateral_per_point)]
        self.setup(f"create-run {self.run_id!r}", create_run, creator)
        config = self.state_toml
        update = on_run("update-config", "--config-path", str(config.resolve()))
        self.setup(f"update-config from {config}", update, creator)
        self.authorize_clients(cli)
        rate = self.set_epoch_rates(on_run("set-future-epoch-rates"), creator)
        if mint is not None:
            self.fund_treasurer(on_run("treasurer-top-up-rewards"), creator, mint, rate)
        self.setup("set-paused resume", on_run("set-paused", "resume"), creator)
        grantee = self.wallet("grantee").pubkey()
        for i in range(1, o.joiners + 1):
            wallet = (self.keys / f"joiner{i}.json").resolve()
            self.log_line(
                f"joiner {i}: RPC={self.rpc_url} WALLET_FILE={wallet} AUTHORIZER={grantee} "
                f"just start-training-localnet-client run_id={self.run_id}"
            )

    def authorize_clients(self, cli: str) -> None:
        """The documented join authorization scripts: the grantor authorizes the grantee, whose
        delegates are every client's wallet and the extra joiners'."""
        grantor = self.wallet("grantor").pubkey()
        grantee = self.wallet("grantee").pubkey()
        scripts = ROOT / "scripts"
        tools = {"PSYCHE_SOLANA_CLIENT": cli}
        create = scripts / "join-authorization-create.sh"
        self.setup(
            f"join-authorization-create.sh (grantor {grantor} → grantee {grantee})",
            ["sh", str(create), self.rpc_url, str(self.keys / "grantor.json"), str(grantee)],
            tools,
        )
        delegates = sorted(str(p) for p in self.keys.glob("delegate*.json"))
        delegates += [str(self.keys / f"joiner{i}.json") for i in range(1, self.opts.joiners + 1)]
        grantee_and_delegates = [str(self.keys / "grantee.json"), *delegates]
        set_delegates = scripts / "join-authorization-set-delegates.sh"
        self.setup(
            f"join-authorization-set-delegates.sh ({len(delegates)} client wallets)",
            ["sh", str(set_delegates), self.rpc_url, str(grantor), *grantee_and_delegates],
            tools,
        )

    def set_epoch_rates(self, rates: list[str], creator: Mapping[str, str]) -> int | None:
        """``set-future-epoch-rates`` (the ``rates`` command line) when a rate is asked for, or
        the Treasurer pays points; the earning rate set, if any."""
        o = self.opts
        rate = o.earning_rate
        if rate is None and o.treasurer:
            rate = DEFAULT_EARNING_RATE
        if rate is not None or o.slashing_rate is not None:
            if rate is not None:
                rates += ["--earning-rate-total-shared", str(rate)]
            if o.slashing_rate is not None:
                rates += ["--slashing-rate-per-client", str(o.slashing_rate)]
            what = f"{rate} points per epoch, {o.slashing_rate or 0} slashed per ejection"
            self.setup(f"set-future-epoch-rates ({what})", rates, creator)
        return rate

    def fund_treasurer(
        self, top_up: list[str], creator: Mapping[str, str], mint: str, rate: int | None
    ) -> None:
        """Top the Treasurer's escrow up (the ``top_up`` command line) and write what the run
        pays in to ``treasurer.json``."""
        o = self.opts
        top_up += ["--amount", str(o.treasurer_top_up)]
        self.setup(f"treasurer-top-up-rewards ({o.treasurer_top_up} base units)", top_up, creator)
        info = {
            "mint": mint,
            "decimals": TEST_MINT_DECIMALS,
            "collateral_per_point": o.collateral_per_point,
            "earning_rate_total_shared": rate,
            "top_up": o.treasurer_top_up,
            "creator": str(self.wallet("creator").pubkey()),
        }
        (self.out / "treasurer.json").write_text(json.dumps(info, indent=1) + "\n")

    def create_test_mint(
        self, cli: str, endpoints: Sequence[str], creator: Mapping[str, str]
    ) -> str:
        """A fresh SPL mint, the run creator its mint authority, with the escrow's top-up minted
        to the creator; its address."""
        me = self.wallet("creator").pubkey()
        argv = [cli, "create-test-mint", *endpoints, "--decimals", str(TEST_MINT_DECIMALS)]
        argv += ["--mint-to", f"{me}={self.opts.treasurer_top_up}"]
        out = self.setup("create-test-mint (the reward token)", argv, creator)
        try:
            return str(json.loads(out)["mint"])
        except (ValueError, KeyError, TypeError):
            raise RuntimeError(f"create-test-mint printed no mint: {out[:200]!r}") from None

    # --- the joiners --------------------------------------------------------------------------

    def p2p_port(self, slot: int) -> int:
        if slot not in self.p2p_ports:
            base = self.opts.p2p_base_port
            self.p2p_ports[slot] = base + slot if base else free_port()
        return self.p2p_ports[slot]

    def p2p_host(self, slot: int) -> str:
        if self.internet is None:
            return "127.0.0.1"
        return self.internet.address(f"client-{slot}")

    def p2p_addr(self, slot: int) -> str:
        key = bytes(self.wallet(f"delegate{slot}").pubkey())
        return f"/ip4/{self.p2p_host(slot)}/tcp/{self.p2p_port(slot)}/p2p/{peer_id_for(key)}"

    def env_file(self, slot: int) -> Path:
        return self.out / "env" / f"client-{slot}.env"

    def write_client_env(self, slot: int, label: str) -> Path:
        """The .env a joiner writes (user documentation: joining a run), plus the testnet's
        P2P settings, event log and checkpoint directory."""
        o = self.opts
        others = [self.p2p_addr(s) for s in range(1, o.num_clients + 1) if s != slot]
        wallet = self.keys / f"delegate{slot}.json"
        values = {
            "RPC": self.rpc_url,
            "WS_RPC": self.ws_url,
            # One local SVM: the fallback pair is the same front (a joiner would name a second
            # provider here).
            "RPC_2": self.rpc_url,
            "WS_RPC_2": self.ws_url,
            "RUN_ID": self.run_id,
            "AUTHORIZER": str(self.wallet("grantee").pubkey()),
            "RAW_WALLET_PRIVATE_KEY": wallet.read_text().replace(" ", ""),
            "DATA_PARALLELISM": "1",
            "TENSOR_PARALLELISM": "1",
            "MICRO_BATCH_SIZE": str(o.micro_batch_size),
            "PSYCHE_DEVICE": o.device,
            "BIND_P2P_HOST": "127.0.0.1" if self.internet is None else "0.0.0.0",
            "BIND_P2P_PORT": str(self.p2p_port(slot)),
            **({"PSYCHE_BOOTSTRAP_PEERS": ",".join(others)} if o.bootstrap_peers else {}),
            "EVENT_LOG": str(self.client_log(label).resolve()),
            "CHECKPOINT_DIR": str((o.checkpoint_dir or self.out / "checkpoints").resolve()),
            "LOGS": "console",
            **self.client_settings(label),
        }
        path = self.env_file(slot)
        write_env_file(
            path, values, f"{label} of the Solana local testnet (psyche-solana-local-testnet)"
        )
        return path

    # --- LocalTestnet hooks -------------------------------------------------------------------

    def start_coordinator_side(self) -> None:
        if self.opts.internet is not None:
            self.internet = EmulatedInternet(self.opts.internet.hosts(self.opts.num_clients))
            self.internet.__enter__()
            self.log_line(self.describe_internet())
        self.start_svm()
        self.create_run()
        self.follower = ChainFollower(self.rpc_url, self.ws_url, self.run_id, self.states_file)
        self.follower.start()
        if self.follower.error:
            raise RuntimeError(f"following the coordinator account failed: {self.follower.error}")
        ports = ", ".join(str(self.p2p_port(s)) for s in range(1, self.opts.num_clients + 1))
        self.log_line(
            f"starting {self.opts.num_clients} clients from their env files in {self.out / 'env'}"
            f" (P2P ports {ports})"
        )

    def check_coordinator_side(self) -> None:
        if self.svm is not None and self.svm.popen.poll() is not None:
            raise self.svm.failed(f"the chain ({self.svm.label}) exited unexpectedly")
        if self.follower is not None and not self.follower.alive:
            raise RuntimeError(f"the chain follower stopped: {self.follower.error}")

    def stop_coordinator_side(self) -> None:
        try:
            if self.follower is not None:
                self.follower.stop()
            if self.svm is not None and self.svm.popen.poll() is None:
                self.write_program_calls()
        finally:
            if self.internet is not None:
                self.internet.close()

    def describe_internet(self) -> str:
        assert self.internet is not None and self.opts.internet is not None
        o = self.opts.internet
        hosts = ", ".join(
            f"client-{n} {'NAT' if n in o.nat_clients else 'public'} "
            f"{self.internet.address(f'client-{n}')}"
            for n in range(1, self.opts.num_clients + 1)
        )
        return (
            f"emulated internet {self.internet.prefix}: {hosts}; uplink "
            f"{o.uplink_mbps or 'unshaped'} Mbit/s, downlink {o.downlink_mbps or 'unshaped'} Mbit/s"
        )

    def write_program_calls(self) -> None:
        """Tally the instructions the programs executed for this run (``program-calls.json``)."""
        sigs = list(self.setup_signatures)
        for label in sorted(self.tallies):
            events = read_events(self.client_log(label))
            sigs += [e.signature for e in events if isinstance(e, TransactionEvent)]
        try:
            calls = tally_program_calls(self.rpc_url, sigs, program_ids())
        except (httpx.HTTPError, ValueError) as e:
            self.log_line(f"could not look the run's transactions up: {e}")
            return
        (self.out / "program-calls.json").write_text(json.dumps(calls, indent=1) + "\n")
        done = calls["calls"]["psyche_coordinator"]
        self.log_line(
            f"{calls['transactions']} transactions ({calls['failed']} failed) executed by the "
            "SBF programs; psyche_coordinator: "
            + ", ".join(f"{name} {n}" for name, n in done.items())
        )

    def explorer_sources(self) -> list[str]:
        return ["--rpc", self.rpc_url, "--ws-rpc", self.ws_url, "--run-id", self.run_id]

    def infrastructure(self) -> list[Proc]:
        return [self.svm] if self.svm is not None else []

    def client_process(self, slot: int, label: str) -> Proc:
        env = read_env_file(self.write_client_env(slot, label))
        argv = [console_script("psyche-solana-client"), "train"]
        if self.internet is not None:
            argv = ["ip", "netns", "exec", self.internet.namespace(label), *argv]
        return self.spawn(label, argv, env=container_env(env))


def make_solana_testnet(
    options: SolanaTestnetOptions, log: Callable[[str], None] = print
) -> SolanaTestnet:
    state = options.config_path / "state.toml"
    run = load_run_config(state)
    run_id = options.run_id or run.run_id
    if not run_id:
        raise ValueError("no run id: pass --run-id or set run_id in state.toml")
    for so in PROGRAMS:
        if not (ROOT / "target" / "deploy" / f"{so}.so").is_file():
            raise RuntimeError(
                f"target/deploy/{so}.so is missing: build it with scripts/build-sbf.sh"
            )
    llm = run.model
    if isinstance(llm, LLM) and isinstance(llm.data_location, ServerData):
        raise ValueError(
            f"{options.config_path / 'state.toml'}: a Server data location needs a data server, "
            "and a Solana run has none; use Local token files (see config/tiny-solana)"
        )
    # The default, like every path the launcher hands its children, is absolute.
    out = options.out_dir or Path.cwd() / "runs" / f"{run_id}-testnet"
    for sub in ("logs", "events", "keys", "env"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    for old in [*(out / "events").glob("*.jsonl"), out / "chain-events.jsonl"]:
        old.unlink(missing_ok=True)
    override = None
    if options.first_client_checkpoint:
        override = state_with_checkpoint(state, options.first_client_checkpoint, out / "config")
        run = load_run_config(override)
    prepare_local_inputs(run, options.config_path, log)
    return SolanaTestnet(options, run, out, log_line=log, state_override=override)
