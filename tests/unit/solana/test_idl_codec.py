"""The IDL-driven borsh codec on a small hand-written IDL (Anchor ≥0.30 format)."""

from __future__ import annotations

import struct

import pytest

from psyche.solana.idl import IdlCodec, IdlError

IDL = {
    "address": "11111111111111111111111111111112",
    "metadata": {"name": "t", "version": "0.1.0", "spec": "0.1.0"},
    "instructions": [
        {
            "name": "do_it",
            "discriminator": [1, 2, 3, 4, 5, 6, 7, 8],
            "accounts": [
                {"name": "user", "writable": True, "signer": True},
                {"name": "group", "accounts": [{"name": "inner", "writable": True}]},
                {"name": "system_program", "address": "11111111111111111111111111111111"},
            ],
            "args": [
                {"name": "params", "type": {"defined": {"name": "Params"}}},
                {"name": "flag", "type": {"option": "bool"}},
            ],
        }
    ],
    "accounts": [{"name": "Acc", "discriminator": [9, 9, 9, 9, 9, 9, 9, 9]}],
    "errors": [{"code": 6000, "name": "Boom", "msg": "boom"}],
    "types": [
        {
            "name": "Acc",
            "serialization": "bytemuck",
            "repr": {"kind": "c"},
            "type": {
                "kind": "struct",
                "fields": [
                    {"name": "nonce", "type": "u64"},
                    {"name": "key", "type": "pubkey"},
                    {"name": "words", "type": {"array": ["u64", 3]}},
                    {"name": "raw", "type": {"array": ["u8", 4]}},
                    {"name": "items", "type": {"array": [{"defined": {"name": "Item"}}, 2]}},
                ],
            },
        },
        {
            "name": "Item",
            "type": {
                "kind": "struct",
                "fields": [
                    {"name": "a", "type": "u16"},
                    {"name": "b", "type": "i8"},
                    {"name": "_pad", "type": {"array": ["u8", 1]}},
                ],
            },
        },
        {
            "name": "Params",
            "type": {
                "kind": "struct",
                "fields": [
                    {"name": "name", "type": "string"},
                    {"name": "list", "type": {"vec": "u32"}},
                    {"name": "blob", "type": "bytes"},
                    {"name": "choice", "type": {"defined": {"name": "Choice"}}},
                    {"name": "x", "type": "f32"},
                    {"name": "big", "type": "u128"},
                ],
            },
        },
        {
            "name": "Choice",
            "type": {
                "kind": "enum",
                "variants": [
                    {"name": "Unit"},
                    {"name": "New", "fields": ["string"]},
                    {
                        "name": "Named",
                        "fields": [
                            {"name": "p", "type": "u8"},
                            {"name": "q", "type": {"option": "string"}},
                        ],
                    },
                ],
            },
        },
    ],
}


def test_fixed_account_size_decode_and_roundtrip() -> None:
    c = IdlCodec(IDL)
    assert c.account_size("Acc") == 8 + 8 + 32 + 24 + 4 + 2 * 4
    value = {
        "nonce": 7,
        "key": bytes(range(32)),
        "words": [1, 2, 2**64 - 1],
        "raw": b"\x01\x02\x03\x04",
        "items": [{"a": 1, "b": -1, "_pad": b"\0"}, {"a": 65535, "b": 5, "_pad": b"\0"}],
    }
    data = c.encode_account("Acc", value)
    assert len(data) == c.account_size("Acc")
    assert data[:8] == bytes([9] * 8) and data[8:16] == struct.pack("<Q", 7)
    assert c.decode_account("Acc", data) == value
    with pytest.raises(IdlError, match="discriminator"):
        c.decode_account("Acc", bytes(8) + data[8:])


@pytest.mark.parametrize(
    "choice",
    ["Unit", {"New": "hello"}, {"Named": {"p": 3, "q": None}}, {"Named": {"p": 1, "q": "é"}}],
)
def test_instruction_data_roundtrip(choice: object) -> None:
    c = IdlCodec(IDL)
    params = {
        "name": "run",
        "list": [1, 2],
        "blob": b"xy",
        "choice": choice,
        "x": 0.5,
        "big": 2**100,
    }
    data = c.instruction_data("do_it", {"params": params, "flag": True})
    assert data[:8] == bytes(range(1, 9))
    assert c.decode_instruction(data) == ("do_it", {"params": params, "flag": True})


def test_accounts_flattened_and_errors_named() -> None:
    c = IdlCodec(IDL)
    accs = c.instruction("do_it").accounts
    assert [a.name for a in accs] == ["user", "inner", "system_program"]
    assert accs[0].signer and accs[0].writable and not accs[1].signer and accs[1].writable
    assert c.error_name(6000) == "Boom" and c.error_name(6001) is None


def test_bad_values_are_rejected() -> None:
    c = IdlCodec(IDL)
    with pytest.raises(IdlError, match="missing argument"):
        c.instruction_data("do_it", {"flag": None})
    with pytest.raises(IdlError):
        c.encode("Item", {"a": -1, "b": 0, "_pad": b"\0"})
    with pytest.raises(IdlError, match="unknown variant"):
        c.encode("Choice", "Nope")
