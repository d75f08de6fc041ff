"""What a Solana command says when its run does not exist: the run ids that do, where the RPC
endpoint can list them cheaply (``getProgramAccounts`` filtered on the ``CoordinatorInstance``
discriminator; public endpoints may refuse it, the local SVM does not have it: then the message
just says the run does not exist).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Coroutine
from typing import Any

__all__ = ["LIST_TIMEOUT_S", "MAX_LISTED", "explain_missing_run"]

LIST_TIMEOUT_S = 5.0
MAX_LISTED = 20


async def known_run_ids(session: Any) -> list[str] | None:
    """The run ids under the session's coordinator program, or None when the endpoint will not
    list them (in time)."""
    from psyche.solana.rpc import decode_account_data

    idl = session.coordinator.idl
    disc = idl.account_discriminators["CoordinatorInstance"]
    params = [
        str(session.coordinator.program_id),
        {
            "encoding": "base64",
            "commitment": "confirmed",
            "filters": [
                {
                    "memcmp": {
                        "offset": 0,
                        "bytes": base64.b64encode(disc).decode(),
                        "encoding": "base64",
                    }
                }
            ],
        },
    ]
    try:
        async with asyncio.timeout(LIST_TIMEOUT_S):
            found = await session.rpcs[0].call("getProgramAccounts", params)
        ids = [
            str(
                idl.decode_account("CoordinatorInstance", decode_account_data(a["account"]))[
                    "run_id"
                ]
            )
            for a in found
        ]
    except Exception:  # a hint only: any failure means "cannot list"
        return None
    return sorted(ids)


async def explain_missing_run(session: Any, coro: Coroutine[Any, Any, Any]) -> Any:
    """Await ``coro``; a :class:`~psyche.solana.session.RunNotFoundError` from it is
    raised again with the existing run ids named, when they can be listed."""
    from psyche.solana.session import RunNotFoundError

    try:
        return await coro
    except RunNotFoundError as e:
        ids = await known_run_ids(session)
        if ids is None:
            raise
        if not ids:
            detail = ": this coordinator program has no runs on this cluster (check RPC)"
        else:
            shown = ", ".join(repr(i) for i in ids[:MAX_LISTED])
            more = f" and {len(ids) - MAX_LISTED} more" if len(ids) > MAX_LISTED else ""
            detail = f"; runs that exist: {shown}{more}"
        raise RunNotFoundError(e.run_id, detail) from None
