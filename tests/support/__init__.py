"""Helpers shared by the unit, integration and end-to-end tests, each written once.

- `waiting`: poll a condition until it holds (`until`, `until_sync`, `eventually`).
- `net`: a free local TCP port (`free_port`).
- `configs`: small coordinator configs (`four_client_config`, `two_client_config`).
- `rounds`: a new run's coordinator driven into its first training round
  (`first_round`).
- `centralized`: a centralized server serving in this event loop (`serving_centralized`).

Import them as `from support.<module> import ...` (pytest puts `tests/` on the import path).
"""
