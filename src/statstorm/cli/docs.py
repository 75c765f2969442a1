"""The CLI reference (docs/cli.md) generated from `--help`, so the docs cannot drift.

Regenerate with `python -m statstorm.cli.docs > docs/cli.md`; a test fails when it is stale.
"""

from __future__ import annotations

import click

from statstorm.cli import cli, load_commands


EXIT_CODES = ("0 success, 1 failure, 2 bad usage or input, 3 needs root, 4 missing dependency, "
              "5 busy (port or name taken), 130 interrupted")


def walk(cmd: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    """`cmd` and every subcommand under it, depth first, each with its path of names."""
    out = [(path, cmd)]
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.commands):
            out += walk(cmd.commands[name], path + [name])
    return out


def render() -> str:
    load_commands()

    parts = ["# statstorm command reference\n",
             "Generated from `--help` by `python -m statstorm.cli.docs`; do not edit by hand.\n",
             f"Exit codes: {EXIT_CODES}.\n",
             "Errors are one line on stderr (`statstorm: error: …`, naming the fix); with "
             "`--json` also a JSON object on stdout, `{\"error\": …, \"exit\": N}`. A verb "
             "that works over time (lab up/down, trace and trace import, sweep, fsbench, "
             "apply --yes/--rollback, demo, matrix) first says on stderr what it does, in a "
             "terminal or not: one line, `statstorm VERB: …`, once its options are checked "
             "(exporter: `exporter: serving …`).\n"]
    for path, cmd in walk(cli, ["statstorm"]):
        # The options every real invocation has (the group's context_settings reach its
        # subcommands); click also caches a command's help option once it is built, so the
        # output must not depend on whether the CLI ran before in this process.
        ctx = click.Context(cmd, info_name=" ".join(path), terminal_width=100,
                            max_content_width=100, help_option_names=["-h", "--help"])
        parts.append(f"## {' '.join(path)}\n\n```\n{cmd.get_help(ctx)}\n```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(), end="")
