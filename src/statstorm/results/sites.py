"""The sites a web server serves through a PHP pool: one nginx `server` block and the PHP
location in it that passes requests to php-fpm, as nginx's own inheritance resolves it
(`root` from http → server → location, `fastcgi_param` arrays, `upstream` servers). Written by
`adapters/servers/nginx_conf.py`; read by check's facts and apply's target.
"""

from __future__ import annotations

from dataclasses import dataclass

from statstorm.results import jsonread as jr
from statstorm.results.jsontypes import JsonObject, JsonValue


@dataclass(frozen=True)
class Site:
    """One server block and its PHP location (the one passing to the pool, when asked for one).

    `docroot` is the effective `root` (or `alias`, then `docroot_alias`) of the PHP location,
    relative roots resolved against nginx's prefix; when it holds variables `docroot_unknown`
    names them ("$host") and the docroot cannot be known without a request. `passes_to` is
    the `fastcgi_pass` target resolved: a socket's path, `host:port`, or each server of the
    `upstream` it names. The files are where the server block and the `fastcgi_pass` line
    are (the file apply edits for the pool's `fastcgi_param` lines)."""

    server_names: tuple[str, ...] = ()
    listen: tuple[str, ...] = ()
    docroot: str = ""
    docroot_alias: bool = False
    docroot_unknown: str = ""
    fastcgi_pass: str = ""  # as written: unix:/run/php/x.sock, 127.0.0.1:9000, an upstream
    passes_to: tuple[str, ...] = ()
    script_filename: str = ""  # the SCRIPT_FILENAME fastcgi_param in effect ("" when none)
    config_file: str = ""
    config_line: int = 0
    pass_file: str = ""
    pass_line: int = 0

    @property
    def known_docroot(self) -> str:
        """The docroot when it holds no variable, else ''."""
        return "" if self.docroot_unknown else self.docroot

    def to_json(self) -> JsonObject:
        return {"server_names": list(self.server_names), "listen": list(self.listen),
                "docroot": self.docroot, "docroot_alias": self.docroot_alias,
                "docroot_unknown": self.docroot_unknown, "fastcgi_pass": self.fastcgi_pass,
                "passes_to": list(self.passes_to), "script_filename": self.script_filename,
                "config_file": self.config_file, "config_line": self.config_line,
                "pass_file": self.pass_file, "pass_line": self.pass_line}

    @classmethod
    def from_json(cls, data: JsonValue) -> Site:
        d = jr.obj(data, "site")
        return cls(server_names=jr.strs(d, "server_names"), listen=jr.strs(d, "listen"),
                   docroot=jr.str_(d, "docroot"), docroot_alias=jr.bool_(d, "docroot_alias"),
                   docroot_unknown=jr.str_(d, "docroot_unknown"),
                   fastcgi_pass=jr.str_(d, "fastcgi_pass"), passes_to=jr.strs(d, "passes_to"),
                   script_filename=jr.str_(d, "script_filename"),
                   config_file=jr.str_(d, "config_file"), config_line=jr.int_(d, "config_line"),
                   pass_file=jr.str_(d, "pass_file"), pass_line=jr.int_(d, "pass_line"))
