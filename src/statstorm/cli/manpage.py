"""Man pages generated from `--help`, like docs/cli.md (cli/docs.py): `statstorm(1)` for the
whole CLI and `statstorm-VERB(1)` for each verb with its subcommands, so they cannot drift.

scripts/package.sh writes them into the package: `python -m statstorm.cli.manpage DIR`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from statstorm import __version__
from statstorm.cli import cli, load_commands
from statstorm.cli.docs import EXIT_CODES, walk

SECTION = "1"


def escape(text: str) -> str:
    """`text` as roff text: backslashes doubled, a leading `.` or `'` kept from being read as
    a request, `-` as a hyphen-minus (so options can be copied from the page)."""
    out = []
    for line in text.splitlines():
        line = line.replace("\\", "\\e").replace("-", "\\-")
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def _help(cmd: click.Command, path: list[str]) -> str:
    ctx = click.Context(cmd, info_name=" ".join(path), terminal_width=80, max_content_width=80,
                        help_option_names=["-h", "--help"])
    return cmd.get_help(ctx)


def page(cmd: click.Command, path: list[str], see_also: list[str]) -> str:
    """One man page: `cmd` and every subcommand under it, each as its `--help` text."""
    name = "-".join(path)
    summary = cmd.get_short_help_str(limit=120).rstrip(".")
    parts = [f'.TH {name.upper()} {SECTION} "" "statstorm {__version__}" "statstorm"',
             ".SH NAME", f"{escape(name)} \\- {escape(summary)}"]
    for sub_path, sub in walk(cmd, path):
        heading = "SYNOPSIS" if sub_path == path else escape(" ".join(sub_path))
        parts += [f'.SH "{heading}"', ".nf", escape(_help(sub, sub_path)), ".fi"]
    parts += [".SH EXIT STATUS", escape(EXIT_CODES) + ".",
              ".SH SEE ALSO", ",\n".join(f".BR {escape(s)} ({SECTION})" for s in see_also)
              or "statstorm's docs/ directory"]
    return "\n".join(parts) + "\n"


def pages() -> dict[str, str]:
    """File name → man page: statstorm.1 and statstorm-VERB.1 for each verb."""
    load_commands()
    verbs = sorted(cli.commands)
    out = {f"statstorm.{SECTION}": page(cli, ["statstorm"], [f"statstorm-{v}" for v in verbs])}
    for verb in verbs:
        out[f"statstorm-{verb}.{SECTION}"] = page(cli.commands[verb], ["statstorm", verb],
                                                  ["statstorm"])
    return out


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in pages().items():
        (directory / name).write_text(text)
        written.append(directory / name)
    return written


if __name__ == "__main__":
    for p in write(Path(sys.argv[1] if len(sys.argv) > 1 else ".")):
        print(p)
