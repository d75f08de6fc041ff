"""psyche: train one transformer language model together on untrusted computers.

Layers (imports point one way): ``protocol`` (byte-exact primitives and run-config types) ←
``coordinator`` (pure state machine) ← ``distro``/``training``/``data`` ← ``p2p``/``backends`` ←
``daemon`` ← ``cli``. Nothing imports ``cli``.
"""

__version__ = "0.1.0"
