"""Many clients in one process: in-memory network, simulated clock, the real round engine."""
