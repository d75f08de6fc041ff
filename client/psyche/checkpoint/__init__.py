"""Checkpoints: local Hugging Face directories, Hub uploads, and P2P model sharing for joiners.

  ``local``     save ``{dir}/{run_id}-step{N}/`` (config, tokenizer files, ≤ 5 GiB safetensors
                shards + index), prune to the newest ``keep`` steps
  ``hub``       upload a checkpoint directory as one commit "step N" (child process, cancellable)
  ``manifest``  the P2P manifest: a model as hashed pieces, strict decoding, verified assembly
  ``p2p``       serving a snapshot, agreeing on a manifest, fetching it from several peers

The daemon drives them from :mod:`psyche.daemon.checkpointing` (elected checkpointers) and
:mod:`psyche.daemon.sharing` (every client serves after cooldown; joiners fetch).
"""
