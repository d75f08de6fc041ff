"""``print-all-help [--markdown]``: every command's help of one program in one document.

The user documentation's command-line pages are this output (``--markdown``); plain text without
the flag. Each program gets its own hidden ``print-all-help`` command (:func:`add_print_all_help`)
that walks its click group, so the pages cannot drift from what the program accepts.
"""

from __future__ import annotations

import inspect

import click

__all__ = ["add_print_all_help", "all_help"]


def _walk(
    cmd: click.Command, path: list[str], parent: click.Context | None
) -> list[tuple[list[str], click.Context]]:
    ctx = click.Context(cmd, info_name=path[-1], parent=parent)
    out = [(path, ctx)]
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                out.extend(_walk(sub, [*path, name], ctx))
    return out


def _option_line(param: click.Parameter, ctx: click.Context) -> str:
    record = param.get_help_record(ctx)
    if record is None:
        return ""
    names, text = record
    return f"* `{names}` — {text}" if text else f"* `{names}`"


def all_help(cmd: click.Command, prog: str, *, markdown: bool) -> str:
    """The help of ``cmd`` and of every visible subcommand, as Markdown or plain text."""
    parts: list[str] = []
    entries = _walk(cmd, [prog], None)
    if markdown:
        parts.append(f"# Command-line help for `{prog}`\n")
        parts.append(
            f"This document contains the help content for the `{prog}` command-line program.\n"
        )
        if len(entries) > 1:
            parts.append("**Command overview:**\n")
            parts.extend(f"* `{' '.join(path)}`" for path, _ in entries)
            parts.append("")
    for path, ctx in entries:
        command = ctx.command
        name = " ".join(path)
        if not markdown:
            parts.append(f"$ {name} --help")
            parts.append(command.get_help(ctx))
            parts.append("")
            continue
        parts.append(f"## `{name}`\n")
        if command.help:
            parts.append(inspect.cleandoc(click.unstyle(command.help)) + "\n")
        pieces = command.collect_usage_pieces(ctx)
        parts.append(f"**Usage:** `{name} {' '.join(pieces)}`\n")
        if isinstance(command, click.Group):
            subs = [
                (n, c)
                for n in command.list_commands(ctx)
                if (c := command.get_command(ctx, n)) is not None and not c.hidden
            ]
            if subs:
                parts.append("**Subcommands:**\n")
                parts.extend(f"* `{n}` — {c.get_short_help_str(120)}" for n, c in subs)
                parts.append("")
        options = [line for p in command.get_params(ctx) if (line := _option_line(p, ctx))]
        if options:
            parts.append("**Options:**\n")
            parts.extend(options)
            parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def add_print_all_help(group: click.Group, prog: str) -> None:
    """Give ``group`` a hidden ``print-all-help [--markdown]`` command."""

    @click.command("print-all-help", hidden=True)
    @click.option("--markdown", is_flag=True, help="Markdown (the documentation's pages).")
    def print_all_help(markdown: bool) -> None:
        """Print the help of every command of this program."""
        click.echo(all_help(group, prog, markdown=markdown), nl=False)

    group.add_command(print_all_help)
