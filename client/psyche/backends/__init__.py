"""Coordinator hosts behind one seam: :mod:`psyche.backends.base` (the ``Backend`` protocol the
daemon imports), :mod:`psyche.backends.centralized` (TCP server and client) and, later, Solana."""
