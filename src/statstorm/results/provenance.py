"""Where a result file came from, as any result file may say it: the command line that wrote
it (`command`: an argv list or one shell line) and the versions of what it ran on
(`environment`, or `versions` in older files). Read by the report's environment section and
its list of sources; a file that says nothing has an empty provenance (the report then
rebuilds the command from what the file holds).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from statstorm.results.jsontypes import JsonObject, JsonValue


@dataclass(frozen=True)
class Provenance:
    command: tuple[str, ...] | str | None = None
    environment: tuple[tuple[str, str], ...] = ()  # (component, version), in the file's order

    def command_line(self) -> str:
        """The command as one shell line ('' when the file does not name it)."""
        if isinstance(self.command, tuple):
            return " ".join(shlex.quote(a) for a in self.command)
        return self.command or ""

    @classmethod
    def from_json(cls, data: JsonValue) -> Provenance:
        """Any result file's JSON; a value that is not an object says nothing."""
        d: JsonObject = data if isinstance(data, dict) else {}
        given = d.get("command")
        command: tuple[str, ...] | str | None = (
            tuple(str(a) for a in given) if isinstance(given, list)
            else given if isinstance(given, str) and given else None)
        env = d.get("environment") or d.get("versions") or {}
        return cls(command, tuple((str(k), str(v)) for k, v in env.items())
                   if isinstance(env, dict) else ())
