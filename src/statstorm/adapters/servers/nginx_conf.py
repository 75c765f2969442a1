"""nginx's configuration read with crossplane (the NGINX-maintained parser): the whole tree
from the master's configuration file, its `include`s followed where they stand, and the
sites passing to a php-fpm pool resolved as nginx resolves them (`root` inherited from
http → server → location, `fastcgi_param` arrays inherited only by a level that sets none,
`upstream` blocks expanded into their servers)."""

from __future__ import annotations

import errno
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

import crossplane  # type: ignore[import-untyped]

from statstorm.errors import ComponentError, PrivilegeError
from statstorm.results.sites import Site

DEFAULT_CONF = "/etc/nginx/nginx.conf"  # Debian's --conf-path
DEFAULT_PREFIX = "/usr/share/nginx/"  # Debian's --prefix: relative roots and -c start here
_MAX_INCLUDE_DEPTH = 32
_VARIABLE = re.compile(r"\$\{?([A-Za-z0-9_]+)\}?")


@dataclass(frozen=True)
class Directive:
    """One directive as written: its arguments, where it is, the block it opens (if any)."""

    name: str
    args: tuple[str, ...]
    file: str
    line: int
    block: tuple[Directive, ...] | None = None


@dataclass(frozen=True)
class Config:
    """A whole configuration: the main file, nginx's prefix, its directives with every
    `include` replaced by the directives of the files it names."""

    path: str
    prefix: str
    directives: tuple[Directive, ...]
    files: tuple[str, ...] = ()  # every file read, the main one first


def read(path: Path | str, prefix: str = DEFAULT_PREFIX) -> Config:
    """Parse the configuration whose main file is `path`; a file that does not parse (or an
    include that cannot be opened) is refused with one line naming it and the line."""
    path = str(path)
    try:
        payload = crossplane.parse(path, catch_errors=False, onerror=lambda e: e,
                                   check_ctx=True, check_args=True)
    except OSError as exc:  # crossplane reads files itself; it catches most, not all
        raise _unreadable(path, exc) from exc
    for err in payload.get("errors", []):
        _refuse(path, err)
    parsed = [list(c.get("parsed", [])) for c in payload["config"]]
    files = tuple(str(c["file"]) for c in payload["config"])
    return Config(path, prefix, _convert(parsed, files, 0, 0), files)


def _unreadable(path: str, exc: OSError) -> ComponentError | PrivilegeError:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return PrivilegeError(f"cannot read nginx's configuration {exc.filename or path}: "
                              "run as root")
    return ComponentError(f"cannot read nginx's configuration {exc.filename or path} "
                          f"({exc.strerror or exc}); give the master's -c file or start nginx")


def _refuse(main: str, err: dict[str, object]) -> None:
    exc = err.get("callback")
    file = str(err.get("file") or main)
    line = err.get("line")
    if isinstance(exc, OSError) and line is None:  # the main file itself
        raise _unreadable(file, exc)
    if isinstance(exc, OSError):
        what = f"cannot open {exc.filename} ({exc.strerror})"
    else:
        what = str(getattr(exc, "strerror", None) or err.get("error") or "unknown error")
        what = re.sub(r" in \S+:\d+$", "", what)  # the place is said once, in front
    where = f"{file}:{line}" if line is not None else file
    raise ComponentError(f"nginx's configuration at {where} does not parse: {what}; "
                         "fix it, `nginx -t` shows the same")


def _convert(parsed: list[list[dict[str, object]]], files: tuple[str, ...], index: int,
             depth: int, stmts: list[dict[str, object]] | None = None) -> tuple[Directive, ...]:
    """The directives of file `index` (or of `stmts` in it), includes expanded in place."""
    if depth > _MAX_INCLUDE_DEPTH:
        raise ComponentError(f"nginx's configuration at {files[index]} includes itself "
                             f"more than {_MAX_INCLUDE_DEPTH} deep; fix its include lines")
    out: list[Directive] = []
    for s in parsed[index] if stmts is None else stmts:
        name = str(s.get("directive", ""))
        if name == "#":
            continue
        incs = s.get("includes")
        if name == "include" and isinstance(incs, list):
            for i in incs:
                out.extend(_convert(parsed, files, int(i), depth + 1))
            continue
        args = s.get("args")
        block = s.get("block")
        out.append(Directive(
            name, tuple(str(a) for a in args) if isinstance(args, list) else (),
            files[index], int(str(s.get("line") or 0)),
            _convert(parsed, files, index, depth, block) if isinstance(block, list) else None))
    return tuple(out)


# -- scopes: what a level inherits ------------------------------------------------------------
@dataclass(frozen=True)
class _Root:
    value: str
    alias: bool
    at: Directive


@dataclass(frozen=True)
class _Scope:
    root: _Root | None = None
    params: tuple[Directive, ...] = ()

    def enter(self, block: tuple[Directive, ...]) -> _Scope:
        roots = [d for d in block if d.name in ("root", "alias") and d.args]
        params = tuple(d for d in block if d.name == "fastcgi_param" and len(d.args) >= 2)
        root = (_Root(roots[-1].args[0], roots[-1].name == "alias", roots[-1])
                if roots else self.root)
        return _Scope(root, params or self.params)  # an array is inherited whole or not


@dataclass(frozen=True)
class _PhpLocation:
    server: Directive
    scope: _Scope
    passing: Directive  # the fastcgi_pass line


@dataclass
class _Walk:
    upstreams: dict[str, tuple[str, ...]] = field(default_factory=dict)
    found: list[_PhpLocation] = field(default_factory=list)


def _blocks(directives: tuple[Directive, ...], name: str) -> list[Directive]:
    return [d for d in directives if d.name == name and d.block is not None]


def _locations(server: Directive, scope: _Scope, block: tuple[Directive, ...],
               walk: _Walk) -> None:
    """Every `fastcgi_pass` under `block` (a location, or an `if` in one), with its scope."""
    for d in block:
        if d.name == "fastcgi_pass" and d.args:
            walk.found.append(_PhpLocation(server, scope, d))
        elif d.name in ("location", "if") and d.block is not None:
            _locations(server, scope.enter(d.block), d.block, walk)


def _walk(config: Config) -> _Walk:
    walk = _Walk()
    for http in _blocks(config.directives, "http"):
        assert http.block is not None
        for up in _blocks(http.block, "upstream"):
            assert up.block is not None
            walk.upstreams[up.args[0] if up.args else ""] = tuple(
                _address(d.args[0]) for d in up.block if d.name == "server" and d.args)
    for http in _blocks(config.directives, "http"):
        assert http.block is not None
        in_http = _Scope().enter(http.block)
        for server in _blocks(http.block, "server"):
            assert server.block is not None
            in_server = in_http.enter(server.block)
            for loc in server.block:
                if loc.name == "location" and loc.block is not None:
                    _locations(server, in_server.enter(loc.block), loc.block, walk)
    return walk


def _address(arg: str) -> str:
    return arg.removeprefix("unix:")


def _passes_to(arg: str, upstreams: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    if "$" not in arg and arg in upstreams:
        return upstreams[arg]
    return (_address(arg),)


def _site(loc: _PhpLocation, config: Config, upstreams: dict[str, tuple[str, ...]]) -> Site:
    block = loc.server.block or ()
    root = loc.scope.root
    value = root.value if root else "html"  # nginx's default root, under its prefix
    unknown = ", ".join(dict.fromkeys("$" + v for v in _VARIABLE.findall(value)))
    if not unknown and not value.startswith("/"):
        value = posixpath.join(config.prefix, value)
    script = [d.args[1] for d in loc.scope.params if d.args[0] == "SCRIPT_FILENAME"]
    return Site(
        server_names=tuple(a for d in block if d.name == "server_name" for a in d.args),
        listen=tuple(d.args[0] for d in block if d.name == "listen" and d.args),
        docroot=value, docroot_alias=bool(root and root.alias), docroot_unknown=unknown,
        fastcgi_pass=loc.passing.args[0], passes_to=_passes_to(loc.passing.args[0], upstreams),
        script_filename=script[-1] if script else "",  # php-fpm keeps the last of a name
        config_file=loc.server.file, config_line=loc.server.line,
        pass_file=loc.passing.file, pass_line=loc.passing.line)


def _best(sites: list[Site]) -> Site:
    """A server's PHP location: the one building SCRIPT_FILENAME from the script's name beats
    a status page's."""
    return next((s for s in sites if "fastcgi_script_name" in s.script_filename), sites[0])


def _per_server(config: Config, listen: str | None) -> tuple[Site, ...]:
    """One site per server block passing to `listen`, or (None) per server block and
    `fastcgi_pass` target."""
    walk = _walk(config)
    by_server: dict[tuple[Directive, str], list[Site]] = {}
    for loc in walk.found:
        site = _site(loc, config, walk.upstreams)
        if listen is None:
            by_server.setdefault((loc.server, site.fastcgi_pass), []).append(site)
        elif any(names_listen(t, listen) for t in site.passes_to):
            by_server.setdefault((loc.server, ""), []).append(site)
    return tuple(_best(s) for s in by_server.values())


def sites(config: Config) -> tuple[Site, ...]:
    """Every server block that passes PHP to FastCGI, once per `fastcgi_pass` target (a
    server may send one location to one pool and another to another)."""
    return _per_server(config, None)


def sites_passing_to(config: Config, listen: str) -> tuple[Site, ...]:
    """Every server block whose PHP location passes to the pool's `listen` address (a
    socket's path, `host:port` or `port`), each with the location passing there."""
    return _per_server(config, listen) if listen else ()


def files_passing_to(config: Config, listen: str) -> tuple[str, ...]:
    """The files whose `fastcgi_pass` names the pool: the ones holding its `fastcgi_param`
    lines, where apply edits them."""
    return tuple(dict.fromkeys(s.pass_file for s in sites_passing_to(config, listen)))


@dataclass(frozen=True)
class RootAt:
    """Where a site passing to a pool takes its docroot from: the `root` (or `alias`)
    directive in effect in its PHP location, its file and line, and the level it is set at
    (`http`, `server`, `location`; '' when none is: nginx's default `html`)."""

    site: Site
    value: str
    file: str
    line: int
    level: str
    alias: bool = False


def roots_passing_to(config: Config, listen: str) -> tuple[RootAt, ...]:
    """The root directive of each server block passing to `listen` (as sites_passing_to
    picks its PHP location): what apply switches to serve a site from another tree."""
    walk = _walk(config)
    by_server: dict[Directive, list[tuple[Site, _PhpLocation]]] = {}
    for loc in walk.found:
        site = _site(loc, config, walk.upstreams)
        if listen and any(names_listen(t, listen) for t in site.passes_to):
            by_server.setdefault(loc.server, []).append((site, loc))
    out = []
    for server, pairs in by_server.items():
        best = _best([s for s, _ in pairs])
        root = next(loc for s, loc in pairs if s is best).scope.root
        if root is None:
            out.append(RootAt(best, "", "", 0, ""))
            continue
        level = ("server" if root.at in (server.block or ()) else
                 "http" if any(root.at in (h.block or ())
                               for h in _blocks(config.directives, "http")) else "location")
        out.append(RootAt(best, root.value, root.at.file, root.at.line, level, root.alias))
    return tuple(out)


def names_listen(target: str, listen: str) -> bool:
    """Whether a resolved `fastcgi_pass` target reaches php-fpm's `listen` address: a socket
    by its exact path; TCP as `host:port` alike, a bare port, or a wildcard host."""
    if not target or not listen:
        return False
    if target == listen:
        return True
    if target.startswith("/") or listen.startswith("/"):
        return False
    if target.endswith(":" + listen):
        return True
    host, _, port = listen.rpartition(":")
    return host in ("0.0.0.0", "[::]", "*") and target.endswith(":" + port)
