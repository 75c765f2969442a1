"""An Apache configuration as `check` reads it: the files (Include/IncludeOptional followed),
the <Directory> sections and what they set for a docroot, and the document roots.

`apache2 -S`/`-M`/`-t -D DUMP_RUN_CFG` tell the server's modules, MPM and virtual hosts
(adapters.apache), but not what a <Directory> section sets; that is read here from the files,
merged the way Apache merges them for a directory: non-regex sections shortest path first,
AllowOverride replaced, Options replaced or adjusted by +/-.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

# Apache 2.4 defaults where no section says otherwise.
DEFAULT_OVERRIDE = "None"
DEFAULT_OPTIONS = "FollowSymLinks"
MPM_DEFAULTS = {  # MaxRequestWorkers, ServerLimit, ThreadsPerChild
    "prefork": (256, 256, 1),
    "worker": (400, 16, 25),
    "event": (400, 16, 25),
}
_SECTION_OPEN = re.compile(r"^<\s*([A-Za-z]+)\s*(.*?)\s*>$")
_SECTION_CLOSE = re.compile(r"^<\s*/\s*([A-Za-z]+)\s*>$")


@dataclass(frozen=True)
class Directory:
    path: str
    allow_override: str | None
    options: str | None
    source: str  # file:line of the opening tag


@dataclass
class ApacheConfig:
    files: list[str] = field(default_factory=list)
    server_root: str = ""
    document_roots: list[str] = field(default_factory=list)
    directories: list[Directory] = field(default_factory=list)
    # name, args, file:line, the <IfModule> conditions it sits under
    directives: list[tuple[str, str, str, tuple[str, ...]]] = field(default_factory=list)
    vhost_of: list[str] = field(default_factory=list)  # per directive: its <VirtualHost>'s file:line, or ''
    vhost_roots: dict[str, str] = field(default_factory=dict)  # <VirtualHost> file:line → DocumentRoot as written
    main_root: str = ""  # the server-level DocumentRoot as written ('' if none)
    defines: dict[str, str] = field(default_factory=dict)  # Define NAME [VALUE]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        line = (buf + line).strip()
        buf = ""
        if line and not line.startswith("#"):
            out.append((start, line))
    return out


def _unquote(value: str) -> str:
    value = value.strip()
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


def read(conf: Path, server_root: str = "/etc/apache2") -> ApacheConfig:
    """The configuration starting at `conf`, includes followed (missing optional ones
    skipped, a missing plain Include ignored as `apache2 -t` would report it)."""
    cfg = ApacheConfig(server_root=server_root)
    _read_file(conf, cfg, [], depth=0)
    return cfg


def _read_file(path: Path, cfg: ApacheConfig, stack: list[tuple[str, str, str]], depth: int) -> None:
    if depth > 16 or str(path) in cfg.files:
        return
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return
    cfg.files.append(str(path))
    for n, line in _logical_lines(text):
        where = f"{path}:{n}"
        close = _SECTION_CLOSE.match(line)
        if close:
            if stack:
                stack.pop()
            continue
        opened = _SECTION_OPEN.match(line)
        if opened:
            stack.append((opened.group(1).lower(), _unquote(opened.group(2)), where))
            continue
        name, _, args = line.partition(" ")
        lname, args = name.lower(), args.strip()
        if lname == "serverroot":
            cfg.server_root = _unquote(args)
        elif lname in ("include", "includeoptional"):
            pattern = _unquote(args)
            if not pattern.startswith("/"):
                pattern = os.path.join(cfg.server_root, pattern)
            for inc in sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]:
                if os.path.isdir(inc):
                    for f in sorted(Path(inc).iterdir()):
                        _read_file(f, cfg, list(stack), depth + 1)
                else:
                    _read_file(Path(inc), cfg, list(stack), depth + 1)
        elif lname == "documentroot":
            cfg.document_roots.append(_unquote(args).rstrip("/") or "/")
            vhost = _vhost(stack)
            if vhost:
                cfg.vhost_roots[vhost] = _unquote(args)
            elif not any(kind == "ifdefine" for kind, _, _ in stack):
                cfg.main_root = _unquote(args)
        else:
            if lname == "define" and args:
                key, _, value = args.partition(" ")
                cfg.defines[key] = _unquote(value)
            cond = tuple(a for kind, a, _ in stack if kind == "ifmodule")
            cfg.directives.append((name, args, where, cond))
            cfg.vhost_of.append(_vhost(stack))
        section = next((s for s in reversed(stack) if s[0] == "directory"), None)
        if section and lname in ("allowoverride", "options"):
            _set_directory(cfg, section, lname, args)


def _vhost(stack: list[tuple[str, str, str]]) -> str:
    """The file:line of the <VirtualHost> a line sits in ('' at server level)."""
    return next((where for kind, _, where in reversed(stack) if kind == "virtualhost"), "")


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand(value: str, variables: dict[str, str]) -> tuple[str, list[str]]:
    """`${NAME}` replaced as Apache replaces it at start-up (from Define and the environment
    envvars makes); the names it does not know are returned (Apache leaves them as written)."""
    unknown: list[str] = []

    def one(m: re.Match[str]) -> str:
        if m.group(1) in variables:
            return variables[m.group(1)]
        unknown.append(m.group(1))
        return m.group(0)
    return _VARIABLE.sub(one, value), unknown


def _set_directory(cfg: ApacheConfig, section: tuple[str, str, str], key: str, args: str) -> None:
    _, path, where = section
    path = path.rstrip("/") or "/"
    for i, d in enumerate(cfg.directories):
        if d.source == where:
            cfg.directories[i] = Directory(d.path, args if key == "allowoverride" else d.allow_override,
                                           args if key == "options" else d.options, d.source)
            return
    cfg.directories.append(Directory(path, args if key == "allowoverride" else None,
                                     args if key == "options" else None, where))


def _merge_options(current: str, new: str) -> str:
    words = new.split()
    if not words or not all(w[0] in "+-" for w in words):
        return " ".join(words) or current
    have = [w for w in current.split()]
    for w in words:
        name = w[1:]
        have = [h for h in have if h.lower() != name.lower()]
        if w[0] == "+":
            have.append(name)
    return " ".join(have)


def _matches(section: str, directory: str) -> bool:
    if section == directory:
        return True
    if any(c in section for c in "*?["):
        return (section.count("/") == directory.count("/")
                and fnmatch.fnmatchcase(directory, section))
    return False


def walk(cfg: ApacheConfig, docroot: str) -> tuple[tuple[str, str, str], ...]:
    """(directory, AllowOverride, Options) in effect at each directory from / to `docroot`."""
    parts = [p for p in docroot.strip("/").split("/") if p]
    dirs = ["/"] + ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    override, options = DEFAULT_OVERRIDE, DEFAULT_OPTIONS
    out = []
    for d in dirs:
        for sec in (s for s in cfg.directories if _matches(s.path, d)):
            if sec.allow_override is not None:
                override = sec.allow_override
            if sec.options is not None:
                options = _merge_options(options, sec.options)
        out.append((d, override, options))
    return tuple(out)


def source_for(cfg: ApacheConfig, docroot: str) -> str:
    """Where the <Directory> section deciding the docroot's AllowOverride is ('' if none)."""
    found = ""
    for d in (d.rstrip("/") or "/" for d, _, _ in walk(cfg, docroot)):
        for sec in cfg.directories:
            if _matches(sec.path, d) and sec.allow_override is not None:
                found = sec.source
    return found


def loaded_modules(cfg: ApacheConfig) -> dict[str, str]:
    """LoadModule lines: module name → file."""
    out = {}
    for n, args, _, _ in cfg.directives:
        if n.lower() == "loadmodule" and len(args.split()) == 2:
            name, path = args.split()
            out[name] = _unquote(path)
    return out


def active(cond: tuple[str, ...], modules: dict[str, str]) -> bool:
    names = set(modules) | {Path(p).name.replace("mod_", "").replace(".so", ".c") for p in modules.values()}
    names |= {f"mod_{Path(p).stem.replace('mod_', '')}.c" for p in modules.values()}
    for c in cond:
        neg = c.startswith("!")
        hit = c.lstrip("!") in names
        if hit == neg:
            return False
    return True


def directive(cfg: ApacheConfig, name: str) -> str | None:
    """The last value of a server-level directive in effect (sections of <IfModule> for a
    module that is not loaded are skipped), or None."""
    modules = loaded_modules(cfg)
    found = None
    for n, args, _, cond in cfg.directives:
        if n.lower() == name.lower() and active(cond, modules):
            found = args
    return found


def mpm(cfg: ApacheConfig) -> str:
    """The MPM the configuration loads ('' if none)."""
    for name in loaded_modules(cfg):
        m = re.fullmatch(r"mpm_(\w+)_module", name)
        if m:
            return m.group(1)
    return ""


def php_handler(cfg: ApacheConfig) -> str:
    """How this configuration runs PHP: mod_php, fcgid, fpm (proxy_fcgi to a socket), or ''."""
    texts = " ".join(args for n, args, _, _ in cfg.directives
                     if n.lower() in ("sethandler", "addhandler", "fcgidwrapper"))
    if "php_module" in loaded_modules(cfg):
        return "mod_php"
    if "fcgid-script" in texts:
        return "fcgid"
    if "proxy:unix:" in texts or "proxy:fcgi:" in texts:
        return "fpm"
    return ""
