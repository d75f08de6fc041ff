"""Builds a client's :class:`ModelKit` from what the coordinator says the run's model is."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from psyche.checkpoint.manifest import SHARED_FILES
from psyche.checkpoint.p2p import ReceivedModel
from psyche.coordinator import Coordinator
from psyche.daemon.checkpointing import gcs_checkpoint_dir, gcs_repo
from psyche.daemon.kit import ModelKit, ModelLoader
from psyche.data.factory import provider_for_location
from psyche.distro import Distro
from psyche.distro.result_format import DistroFormat, ResultFormat
from psyche.protocol.identity import SecretKey
from psyche.protocol.locations import Checkpoint, P2PCheckpoint, P2PGcsCheckpoint
from psyche.protocol.model import LLM
from psyche.protocol.optimizers import DistroOptimizer, SparseLoCoOptimizer
from psyche.training.device import pick_device
from psyche.training.errors import ModelLoadError
from psyche.training.hashing import model_hash
from psyche.training.loading import (
    checkpoint_dtype,
    load_model,
    model_from_state_dict,
    resolve_checkpoint_dir,
)
from psyche.training.parallel import (
    ParallelLayout,
    build_trainer,
    check_tp_compatible,
    device_for_rank,
)
from psyche.training.sparseloco_trainer import OPTIMIZER_STATE_FILE, SparseLoCoTrainer
from psyche.training.trainer import Trainer, distro_config

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

__all__ = ["model_loader"]

log = logging.getLogger("psyche.client")


def model_loader(
    key: SecretKey,
    *,
    device: str = "auto",
    micro_batch_size: int = 2,
    resolve: Callable[[Checkpoint], Path] = resolve_checkpoint_dir,
    data_parallelism: int = 1,
    tensor_parallelism: int = 1,
    grad_accum_fp32: bool = False,
) -> ModelLoader:
    """The loader a client process uses: the model from the checkpoint the coordinator names
    (or as fetched from peers), DisTrO or SparseLoCo after the run's optimizer config, and the
    run's data provider (authenticated with ``key`` where the provider asks for it).
    ``resolve`` finds the checkpoint's files (the Hub cache, or a local directory).

    With ``data_parallelism`` or ``tensor_parallelism`` above 1 the trainer is a
    :class:`~psyche.training.parallel.ParallelTrainer` over that many devices (worker processes
    that rebuild the model from its config and get its weights from this process every step);
    the payload and the weights are those of a single-device client. ``grad_accum_fp32`` sums
    bf16 micro-batch gradients in fp32."""
    dev = pick_device(device)
    # Bad degrees, too few GPUs or mps with parallelism fail here, before any checkpoint is read.
    layout = ParallelLayout(data_parallelism, tensor_parallelism)
    device_for_rank(dev, 0, layout)

    def load(coord: Coordinator, received: ReceivedModel | None) -> ModelKit:
        llm = coord.llm
        _check_optimizer(llm, layout)
        model, files, source = _model_and_files(llm, received, dev, resolve)
        try:
            check_tp_compatible(model.config, layout.tp)
        except ValueError as e:
            raise ModelLoadError(f"this run's model cannot be tensor-parallel here: {e}") from e
        # A run that verifies results takes per-sample commitments from every DisTrO trainer
        # (docs/protocol.md, "Free riders: per-sample commitments").
        commit = coord.config.verification_percent > 0
        trainer, fmt = _trainer_and_format(
            llm, model, files, dev, layout, micro_batch_size, grad_accum_fp32, commit
        )
        data = provider_for_location(llm.data_location, llm.max_seq_len, secret_key=key)
        log.info(
            "model loaded on %s (data parallelism %d, tensor parallelism %d); "
            "training data from %s",
            dev,
            layout.dp,
            layout.tp,
            type(llm.data_location).TAG,
        )
        return ModelKit(trainer=trainer, format=fmt, data=data, files=files, source=source)

    return load


def _check_optimizer(llm: LLM, layout: ParallelLayout) -> None:
    """Refuse a run this client cannot train before any checkpoint is read: an optimizer that
    exchanges no compressed results, or SparseLoCo across devices."""
    if not isinstance(llm.optimizer, DistroOptimizer | SparseLoCoOptimizer):
        raise ModelLoadError(
            f"multi-client runs need the Distro or SparseLoCo optimizer, not "
            f"{type(llm.optimizer).TAG}"
        )
    if isinstance(llm.optimizer, SparseLoCoOptimizer) and layout.is_parallel:
        raise ModelLoadError(
            "the SparseLoCo optimizer trains on one device per client; run without "
            "--data-parallelism/--tensor-parallelism"
        )


def _trainer_and_format(
    llm: LLM,
    model: PreTrainedModel,
    files: dict[str, bytes],
    dev: torch.device,
    layout: ParallelLayout,
    micro_batch_size: int,
    grad_accum_fp32: bool,
    commit: bool = False,
) -> tuple[Trainer | SparseLoCoTrainer, ResultFormat]:
    """The trainer of the run's optimizer around ``model``, and the format of its results.
    SparseLoCo takes its run-global state out of ``files``. ``commit``: DisTrO payloads carry
    per-sample commitments (a run that verifies)."""
    if isinstance(llm.optimizer, SparseLoCoOptimizer):
        sparseloco = SparseLoCoTrainer(model, llm.optimizer, micro_batch_size=micro_batch_size)
        _load_optimizer_state(sparseloco, files)
        return sparseloco, sparseloco.format
    assert isinstance(llm.optimizer, DistroOptimizer)  # _check_optimizer let no other through
    distro = Distro(model.named_parameters(), distro_config(llm.optimizer), commitments=commit)
    trainer = build_trainer(
        model,
        distro,
        micro_batch_size=micro_batch_size,
        device=dev,
        data_parallelism=layout.dp,
        tensor_parallelism=layout.tp,
        grad_accum_fp32=grad_accum_fp32,
    )
    trainer.commit_samples = trainer.verifiable_lookahead = commit
    return trainer, DistroFormat(distro.payload_spec)


def _model_and_files(
    llm: LLM,
    received: ReceivedModel | None,
    dev: torch.device,
    resolve: Callable[[Checkpoint], Path],
) -> tuple[PreTrainedModel, dict[str, bytes], str]:
    """The model (from peers, or from the checkpoint the run names), the files that came with
    it (``config.json``, tokenizer, optimizer state) and where it came from."""
    if received is not None:
        # Built in the tensors' own dtype: the joiner must hold the servers' exact bits.
        config = received.manifest.config_json
        model = model_from_state_dict(config, received.tensors, device=dev)
        if model_hash(model) != received.manifest.model_hash:
            raise ModelLoadError("the model fetched from peers does not match its manifest")
        return model, {**received.files, "config.json": config.encode()}, "p2p"
    if isinstance(llm.checkpoint, P2PCheckpoint | P2PGcsCheckpoint):
        raise ModelLoadError("this run's model is only available from peers (P2P checkpoint)")
    gcs = gcs_repo(llm.checkpoint)
    path = gcs_checkpoint_dir(gcs) if gcs is not None else resolve(llm.checkpoint)
    # The checkpoint's dtype on every device, not the device's default: CPU and GPU clients of one
    # run must hold the same bits (training.loading.checkpoint_dtype).
    dtype = checkpoint_dtype(path)
    model, _ = load_model(path, device=dev, dtype=dtype, architecture=llm.architecture)
    files = {
        name: (path / name).read_bytes()
        for name in ("config.json", *SHARED_FILES)
        if (path / name).is_file()
    }
    return model, files, str(llm.checkpoint.TAG)


def _load_optimizer_state(trainer: SparseLoCoTrainer, files: dict[str, bytes]) -> None:
    """The run-global optimizer state that came with the model (a checkpoint's or a peer's);
    without it the outer momentum starts at zero, as at the run's first step."""
    data = files.pop(OPTIMIZER_STATE_FILE, None)
    if data is None:
        if trainer.state_dict():
            log.info("no %s came with the model: outer momentum from zero", OPTIMIZER_STATE_FILE)
        return
    try:
        trainer.load_state_file(data)
    except ValueError as e:
        raise ModelLoadError(f"the model's optimizer state does not fit this run: {e}") from e
