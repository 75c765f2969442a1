"""What `statstorm apply` would change: a finding's lines, sorted by where they go, and the
edits of the configuration texts that carry them. Pure code: texts in, texts out.

A finding's `change` lines are meant for people (see model.finding); apply acts on the ones
it can place exactly and lists the rest as manual steps:
- `key = value` of a PHP setting that a pool can set → `php_admin_value[key] = value` in the
  pool's section (it beats php.ini, conf.d and the master's -d options, and touches only
  this pool);
- PHP settings the master fixes at start-up for all its workers (OPcache's shared memory,
  its file overrides, extensions) → the master's ini (on a real system a file of statstorm's
  own in the FPM SAPI's conf.d);
- `pm.*` → the pool's directive;
- php-fpm's `[global]` directives (`process_control_timeout`) → the master's configuration
  file, above its `include =` of the pools;
- `fastcgi_param NAME VALUE;` → the web server's lines that pass PHP requests to the pool;
- `name=value,…` after `# mount options for MOUNT POINT:` → options of that mount, one change
  each (GlusterFS FUSE mounts take them live; see commands.apply);
- `gluster volume set VOLUME KEY VALUE` → that volume option;
- `$name = value;` (or `$name['a']['b'] = value;`) after `# in FILE.php:` → that setting in
  the app's PHP configuration file (MediaWiki's LocalSettings.php, Drupal's settings.php),
  appended in a block of statstorm's own; `KEY=value` after `# in DIR/.env:` (Laravel) and
  `a.b.c: value` after `# in FILE.yaml:` (Symfony) → that setting in that file;
- `extension = PATH` → `php_admin_value[extension] = PATH` in the pool: php-fpm loads an
  extension named there into that pool's workers only;
- `mirror APP_TREE` → a local copy of the app's tree, served by switching the `root` of the
  nginx servers passing to the pool (one NGINX_ROOT change per `root` directive, made by
  adapters/apply/mirror.py; `edit_roots` writes them);
- Apache directives after `# apache <Directory DIR>:` or `# apache server config:` → the
  Apache configuration (model.apacheplan);
- other comments, shell commands, sysctls → manual.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from statstorm.model import config_edit, fstab_edit
from statstorm.model.config_edit import ini_value
from statstorm.model.finding import Finding
from statstorm.model.mirror import MIRROR_INCLUDE_PATH
from statstorm.model.network_forecast import FUSE_KEYS, NFS_KEYS
from statstorm.model.phpsettings import SETTABLE
from statstorm.results.apply_verify import Measurement
from statstorm.results.jsontypes import JsonObject

POOL_INI, MASTER_INI, POOL, NGINX, MANUAL = "pool-ini", "master-ini", "pool", "nginx", "manual"
MOUNT, VOLUME, APP, APACHE = "mount", "volume", "app", "apache"
MIRROR, NGINX_ROOT = "mirror", "nginx-root"
FPM_GLOBAL = "fpm-global"
# php-fpm's [global] directives apply sets (in the master's php-fpm.conf).
GLOBAL_KEYS = frozenset({"process_control_timeout", "emergency_restart_threshold",
                         "emergency_restart_interval"})
# Findings --all leaves out (they must be named), and why.
NAMED_ONLY = {
    "huge-code-pages": "huge-code-pages is not part of --all: PHP's code moved to huge pages "
                       "leaves the file statstorm's probes are on, so later traces lose their "
                       "request boundaries; name it to apply it",
    "glusterfs-content-caching": "glusterfs-content-caching is not part of --all: its gain "
                                 "must be measured (on the MediaWiki lab it removed no round "
                                 "trip); name it, or let `statstorm tune` measure it",
    "opcache-timestamps-off": "opcache-timestamps-off is not part of --all: every deploy must "
                              "then reset OPcache, and its gain must be measured; name it, or "
                              "let `statstorm tune` measure it",
    "code-local-mirror": "code-local-mirror is not part of --all: a local mirror of the code "
                         "needs a sync at every deploy; name it to apply it",
    "openafs-fuse-timeouts": "openafs-fuse-timeouts is not part of --all: the kernel then "
                             "keeps missing AFS names 60 s (a new file unseen that long) and "
                             "its gain must be measured; name it, or let `statstorm tune` "
                             "measure it",
}
# Read once by the master (OPcache's shared memory is made before the workers fork, and the
# file-function overrides are installed at start-up): a pool's php_admin_value cannot change them.
MASTER_ONLY = frozenset({
    "zend_extension", "opcache.enable", "opcache.memory_consumption",
    "opcache.interned_strings_buffer", "opcache.max_accelerated_files",
    "opcache.huge_code_pages", "opcache.enable_file_override", "opcache.file_cache",
    "opcache.preload", "opcache.preload_user", "opcache.jit_buffer_size",
    "opcache.max_wasted_percentage", "opcache.lockfile_path",
})
_INI_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*) =(?: (.*))?$")
_PARAM_LINE = re.compile(r"^fastcgi_param\s+([A-Z_]+)\s+([^;\s]+);$")
_MOUNT_HEAD = re.compile(r"^# (?:mount|/etc/fstab) options for (/\S*?):?$")
_MOUNT_OPTS = re.compile(r"^[a-z][a-z0-9-]*(?:=[^,\s]+)?(?:,[a-z][a-z0-9-]*(?:=[^,\s]+)?)*$")
_VOLUME_SET = re.compile(r"^gluster volume set (\S+) (\S+) (\S+)$")
_APP_HEAD = re.compile(r"^# in (/\S+(?:\.php|/\.env|\.ya?ml)):$")
_PHP_ASSIGN = re.compile(r"^(\$[A-Za-z_]\w*(?:\['[A-Za-z0-9_.-]+'\])*)\s*=\s*"
                         r"([A-Za-z0-9_:'\" .-]+);$")
_ENV_ASSIGN = re.compile(r"^([A-Z][A-Z0-9_]*)=([A-Za-z0-9_./:-]*)$")
_YAML_SET = re.compile(r"^([a-z_]+(?:\.[a-z_]+)+): ([A-Za-z0-9_./-]+)$")
_MIRROR_LINE = re.compile(r"^mirror (/\S*)$")
_MIRROR_INCLUDE_LINE = re.compile(rf"^{MIRROR_INCLUDE_PATH} (\S+)$")
_APACHE_HEAD = re.compile(r"^# apache (?:<Directory (/\S*?)>|server config):$")
_APACHE_LINE = re.compile(r"^(AllowOverride|Options|MaxRequestWorkers|ServerLimit|"
                          r"ThreadsPerChild|MaxConnectionsPerChild)\s+(\S.*)$")
_INCLUDE = re.compile(r"^[ \t]*include[ \t]*=")
APP_MARK = "# statstorm apply"
MARK = "; statstorm apply"


@dataclass(frozen=True)
class Change:
    finding: str  # the rule id
    kind: str  # POOL_INI | MASTER_INI | POOL | FPM_GLOBAL | NGINX | MOUNT | VOLUME | APP | APACHE |
    # MIRROR (value: the app's tree) | NGINX_ROOT (value: the new root) | MANUAL
    key: str  # the ini key, pool directive, fastcgi_param, mount or volume option ("" manual)
    value: str
    line: str  # as the finding wrote it
    why: str = ""
    current: str | None = None  # the pool's value now, where known
    where: str = ""  # MOUNT: the mount point; VOLUME: the volume; APP: the file;
    # APACHE: the <Directory> ('' server level); NGINX_ROOT: FILE:LINE of the directive

    def to_json(self) -> JsonObject:
        return {"finding": self.finding, "kind": self.kind, "key": self.key, "value": self.value,
                "current": self.current, "line": self.line, "why": self.why,
                "where": self.where or None}


def unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def classify(f: Finding, settings: dict[str, str] | None = None) -> list[Change]:
    """The finding's change lines as Changes. When a finding has lines apply can place, its
    comment lines only explain them or offer alternatives (`; or: …`), and are dropped."""
    settings = settings or {}
    out: list[Change] = []
    mount_point = app_file = apache_where = ""
    for raw in f.change:
        line = raw.strip()
        if not line:
            continue
        if line.startswith((";", "#")):
            head = _MOUNT_HEAD.match(line)
            mount_point = head.group(1) if head else ""
            app = _APP_HEAD.match(line)
            app_file = app.group(1) if app else ""
            ap = _APACHE_HEAD.match(line)
            apache_where = (ap.group(1) or "/server") if ap else ""
            out.append(Change(f.id, MANUAL, "", "", line, f.title))
            continue
        d = _APACHE_LINE.match(line)
        if apache_where and d:
            out.append(Change(f.id, APACHE, d.group(1), d.group(2).strip(), line, f.title,
                              where="" if apache_where == "/server" else apache_where))
            continue
        mirror = _MIRROR_LINE.match(line)
        if mirror:
            out.append(Change(f.id, MIRROR, "mirror", mirror.group(1), line, f.title))
            continue
        inc = _MIRROR_INCLUDE_LINE.match(line)
        if inc:
            out.append(Change(f.id, MIRROR, "include_path", inc.group(1), line, f.title))
            continue
        a = (_PHP_ASSIGN if app_file.endswith(".php") else
             _ENV_ASSIGN if app_file.endswith("/.env") else _YAML_SET).match(line)
        if app_file and a:
            out.append(Change(f.id, APP, a.group(1), a.group(2).strip(), line, f.title,
                              where=app_file))
            continue
        m = _INI_LINE.match(line)
        p = _PARAM_LINE.match(line)
        v = _VOLUME_SET.match(line)
        if mount_point and _MOUNT_OPTS.match(line):
            for opt in line.split(","):
                key, _, value = opt.partition("=")
                out.append(Change(f.id, MOUNT, key, value, line, f.title, where=mount_point))
        elif v:
            out.append(Change(f.id, VOLUME, v.group(2), v.group(3), line, f.title,
                              where=v.group(1)))
        elif m and not m.group(1).startswith("vm."):
            key, value = m.group(1), unquote(m.group(2) or "")
            kind = (POOL if key.startswith("pm.") else FPM_GLOBAL if key in GLOBAL_KEYS
                    else MASTER_INI if key in MASTER_ONLY else POOL_INI)
            out.append(Change(f.id, kind, key, value, line, f.title, settings.get(key)))
        elif p:
            out.append(Change(f.id, NGINX, p.group(1), p.group(2), line, f.title))
        else:
            out.append(Change(f.id, MANUAL, "", "", line, f.title))
    if any(c.kind != MANUAL for c in out):  # the comments explain or offer alternatives
        out = [c for c in out if not c.line.startswith((";", "#"))]
    return _with_restated_cache(out, settings)


def _with_restated_cache(changes: list[Change], settings: dict[str, str]) -> list[Change]:
    """Clearing open_basedir in a pool is not enough when the master started with it: PHP's
    module start-up then set the realpath cache limit to 0, and the workers inherit that limit.
    Setting realpath_cache_size in the pool writes the limit again in each worker."""
    clears = [c for c in changes if c.kind == POOL_INI and c.key == "open_basedir" and not c.value]
    if not clears or any(c.key == "realpath_cache_size" for c in changes):
        return changes
    size = settings.get("realpath_cache_size") or "4096K"
    return changes + [Change(clears[0].finding, POOL_INI, "realpath_cache_size", size,
                             f"realpath_cache_size = {size}",
                             "restates the size: a master started with open_basedir passes a "
                             "zero realpath cache limit to its workers", size)]


def merge(changes: list[Change]) -> list[Change]:
    """One change per (kind, key): the first finding's wins (findings come most severe first)."""
    seen: set[tuple[str, str, str]] = set()
    out: list[Change] = []
    for c in changes:
        if c.kind != MANUAL:
            if (c.kind, c.where, c.key) in seen:
                continue
            seen.add((c.kind, c.where, c.key))
        out.append(c)
    return out


def mount_options(current: dict[str, str], changes: list[Change]) -> dict[str, str]:
    """A mount's options with its MOUNT changes made (a flag option has the value "")."""
    out = dict(current)
    for c in changes:
        if c.kind == MOUNT:
            out[c.key] = c.value
    return out


def options_text(options: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" if v else k for k, v in options.items())


def edit_fstab(text: str, mount_point: str, changes: list[Change]) -> str | None:
    """/etc/fstab with the MOUNT changes made in the options of `mount_point`'s line: options
    there keep their place (`defaults` included), new ones go at the end, every other byte
    stays; None when no line mounts it (model/fstab_edit.py; FstabError when malformed)."""
    return fstab_edit.set_options(text, lambda target: target == mount_point,
                                  {c.key: c.value for c in changes if c.kind == MOUNT})


def edit_pool(text: str, pool: str, changes: list[Change]) -> str:
    """The php-fpm configuration `text` with the pool's changes (POOL_INI and POOL) made."""
    lines = config_edit.Lines.split(text)
    if config_edit.section_bounds(lines, pool)[0] < 0:
        raise ValueError(f"no [{pool}] section")
    for c in changes:
        if c.kind in (POOL_INI, POOL):
            lo, hi = config_edit.section_bounds(lines, pool)
            config_edit.pool_setting(lines, lo, hi, "ini" if c.kind == POOL_INI else "directive",
                                     c.key, c.value, MARK)
    return lines.text()


def edit_global(text: str, changes: list[Change]) -> str:
    """php-fpm's main configuration `text` with the FPM_GLOBAL changes made in `[global]`,
    above its first `include =` (lines after it would land in the last pool included)."""
    lines = config_edit.Lines.split(text)
    lo, hi = config_edit.section_bounds(lines, "global")
    if lo < 0:
        raise ValueError("no [global] section")
    for c in changes:
        if c.kind == FPM_GLOBAL:
            lo, hi = config_edit.section_bounds(lines, "global")
            stop = next((i for i in range(lo, hi) if _INCLUDE.match(lines.body[i])), hi)
            config_edit.pool_setting(lines, lo, stop, "directive", c.key, c.value, MARK)
    return lines.text()


def edit_ini(text: str, changes: list[Change]) -> str:
    """An ini file (statstorm's own in the master's conf.d) with the MASTER_INI changes."""
    lines = config_edit.Lines.split(text)
    if not lines.body:
        lines.insert(0, "; written by statstorm apply: settings the php-fpm master reads at "
                        "start-up")
    for c in changes:
        if c.kind == MASTER_INI:
            config_edit.ini_setting(lines, c.key, c.value, lines.body[0])
    return lines.text()


def edit_app(text: str, changes: list[Change]) -> str:
    """An app's configuration file with its APP changes, by the file's kind (the changes'
    `where`): a PHP file (MediaWiki's LocalSettings.php, Drupal's settings.php) gets each
    setting once, in a block of statstorm's own at the end (after the app's own lines, so it
    wins; a setting already in that block is replaced); a .env (Laravel) its KEY=value, and a
    YAML file (Symfony's cache.yaml) its dotted key, each where it stands or added."""
    where = next((c.where for c in changes if c.kind == APP), "")
    if where.endswith("/.env"):
        lines = config_edit.Lines.split(text, config_edit.LF_EOL)
        for c in changes:
            if c.kind == APP:
                config_edit.env_setting(lines, c.key, c.value, APP_MARK)
        return lines.text()
    if where.endswith((".yaml", ".yml")):
        lines = config_edit.Lines.split(text, config_edit.LF_EOL)
        for c in changes:
            if c.kind == APP:
                config_edit.yaml_setting(lines, c.key, c.value, APP_MARK)
        return lines.text()
    lines = config_edit.Lines.split(text)
    tail = [ln.strip() for ln in lines.body if not config_edit.blank(ln)][-3:]
    if any("?>" in ln for ln in tail):
        raise ValueError("the file ends with ?>: add the settings by hand")
    if not any(ln.lstrip().startswith("<?php") for ln in lines.body[:3]):
        raise ValueError("not a PHP file (no <?php at its start)")
    try:
        start = lines.body.index(APP_MARK)
    except ValueError:
        start = len(lines.body)
        lines.insert(start, APP_MARK)
    for c in changes:
        if c.kind == APP:
            config_edit.app_setting(lines, start, c.key, c.value)
    return lines.text()


def edit_nginx(text: str, changes: list[Change], listen: str = "") -> str:
    """nginx configuration with the NGINX changes, made where PHP is passed on: each
    `fastcgi_param NAME …;` that builds on $document_root gets the new value (only that word
    changes: other directives and comments on its line stay). A parameter the file does not
    set (Debian's sites set SCRIPT_FILENAME in an included snippet) is added on a line of its
    own after the SCRIPT_FILENAME lines already changed, else after each `fastcgi_pass` to
    `listen`, so that it comes last and wins."""
    for c in (c for c in changes if c.kind == NGINX):
        stmts = config_edit.nginx_statements(text)
        params = [s for s in stmts if len(s.words) >= 3 and s.words[0] == "fastcgi_param"
                  and s.words[1] == c.key]
        found = any(s.words[2] == c.value for s in params)
        for s in reversed([s for s in params if "$document_root" in s.words[2]]):
            a, b = s.spans[2]
            text, found = text[:a] + c.value + text[b:], True
        if found:
            continue
        stmts = config_edit.nginx_statements(text)
        at = [s for s in stmts if len(s.words) >= 3 and s.words[:2] == ("fastcgi_param",
              "SCRIPT_FILENAME") and "$realpath_root" in s.words[2]]
        if not at and listen:
            at = [s for s in stmts if len(s.words) == 2 and s.words[0] == "fastcgi_pass"
                  and s.words[1] in (listen, f"unix:{listen}")]
        eol = "\r\n" if text.count("\r\n") * 2 > text.count("\n") else "\n"
        for s in reversed(at):
            pos = config_edit.line_end_after(text, s.end)
            line = config_edit.line_indent_at(text, s.start) + f"fastcgi_param {c.key} {c.value};"
            text = (text[:pos] + line + eol + text[pos:] if text[pos - 1:pos] == "\n"
                    else text[:pos] + eol + line)
    return text


def edit_roots(text: str, roots: list[tuple[int, str]]) -> str:
    """nginx configuration with the `root` directive that starts on each line given set to
    its new path (only that word changes: quotes, comments and line ends stay);
    ValueError when no `root` starts on that line (the file changed since it was read)."""
    for line, new in sorted(roots, reverse=True):
        if not _NGX_WORD.fullmatch(new):
            raise ValueError(f"cannot write {new!r} as an nginx root")
        stmts = [s for s in config_edit.nginx_statements(text) if s.words[0] == "root"
                 and len(s.words) == 2 and text.count("\n", 0, s.start) + 1 == line]
        if not stmts:
            raise ValueError(f"no root directive on line {line}")
        a, b = stmts[0].spans[1]
        text = text[:a] + new + text[b:]
    return text


_NGX_WORD = re.compile(r"/[A-Za-z0-9_./@+-]*")

__all__ = ["Change", "classify", "edit_fstab", "edit_ini", "edit_nginx", "edit_pool", "merge",
           "edit_roots", "ini_value", "mount_options", "options_text"]


# --verify after the change: two runs in a row within this of each other are settled
SETTLE_TOLERANCE = 0.05


def settled(prev: Measurement, cur: Measurement, tolerance: float = SETTLE_TOLERANCE) -> bool:
    """Whether two measurements in a row agree on the figures whatif predicts (network round
    trips and metadata calls per request, each where both runs have it) within `tolerance`
    of the larger: a new FUSE client and cold caches make fewer or more calls for a while,
    and the prediction is of the steady state."""
    for a, b in ((prev.round_trips_per_request, cur.round_trips_per_request),
                 (prev.syscalls_per_request, cur.syscalls_per_request)):
        if a is None or b is None:
            continue
        if max(a, b) > 0 and abs(a - b) / max(a, b) > tolerance:
            return False
    return True


def whatif_sets(changes: list[Change]) -> tuple[list[str], list[str]]:
    """apply's changes as whatif's --set values, and the ones whatif does not model."""
    sets, other = [], []
    for c in changes:
        if c.kind in (POOL_INI, MASTER_INI, POOL) and c.key in SETTABLE:
            sets.append(f"{c.key}={c.value}")
        elif c.kind == MOUNT and c.key in FUSE_KEYS + NFS_KEYS:
            sets.append(f"mount:{c.key}={c.value}")
        elif c.kind == APP:
            sets.append("app:data-cache=on")
        elif c.kind != MANUAL:
            other.append(f"{c.key}={c.value}")
    return list(dict.fromkeys(sets)), other
