"""apply's configuration edits change only the bytes they mean to (issue #20, part 2), and its
writes of config edits, backup sets and manifests are all-or-nothing (part 1).

Property tests (Hypothesis, derandomised): for random files around the edited line (comments
holding Unicode separators and look-alike directives, LF/CRLF/mixed line ends, indentation,
other directives on the same nginx line, a missing final newline), editing key X leaves every
other byte as it was, and a second edit of the same key changes nothing. Then the real readers
judge edited files: `php-fpm8.2 -t`/`-tt`, `nginx -t`, `apache2 -t`, `findmnt --verify`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, run_cli, unique_name

from statstorm.adapters.apply import backups
from statstorm.adapters.storage import fstab as fstab_adapter
from statstorm.env import Env
from statstorm.errors import ComponentError, UsageError
from statstorm.model import applyplan
from statstorm.model.apacheplan import edit_apache
from statstorm.model.applyplan import MASTER_INI, MOUNT, NGINX, POOL, POOL_INI, Change
from statstorm.results.apply import SCHEMA, FileEdit

PROPS = settings(derandomize=True, max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])

# Characters that split a line for str.splitlines but not for PHP, nginx or libmount; a byte
# that is not UTF-8 (read with surrogateescape); a non-ASCII letter.
ODD = ["\u2028", "\u2029", "\x85", "\x0c", "\x0b", "\x1c", "\x1d", "\x1e", "\udcff", "é"]
EOL = st.sampled_from(["\n", "\r\n"])
VALUE = st.from_regex(r"[0-9]{1,4}[KMG]?", fullmatch=True)


def comment_text(look_alike: str) -> st.SearchStrategy[str]:
    """A comment's text: random characters among the odd ones, or a look-alike directive
    behind a Unicode separator (str.splitlines would make it a line of its own)."""
    plain = st.text(st.sampled_from(list("ab =[]_.;#{}") + ODD), max_size=16)
    hidden = st.tuples(st.sampled_from(ODD[:8]), st.just(look_alike)).map("".join)
    return st.one_of(plain, hidden)


@dataclass
class Built:
    text: str
    span: tuple[int, int] | None  # the bytes the edit may change (None: it adds a line)
    region: tuple[int, int]  # where an added line may go


def assemble(pieces: list[tuple[str, str]], open_end: bool) -> tuple[str, list[int]]:
    """Lines (body, end) joined; the start offset of each line."""
    starts, text = [], ""
    for i, (body, eol) in enumerate(pieces):
        starts.append(len(text))
        text += body + ("" if open_end and i == len(pieces) - 1 else eol)
    return text, starts


def check_edit(before: str, after: str, built: Built, new: str) -> None:
    """`after` is `before` with the span's text replaced by `new`, or, with no span, with one
    insertion (in the region, holding `new`, with the file's line ends)."""
    if built.span is not None:
        a, b = built.span
        assert after == before[:a] + new + before[b:]
        return
    grown = len(after) - len(before)
    at = [p for p in range(built.region[0], built.region[1] + 1)
          if after[:p] == before[:p] and after[p + grown:] == before[p:]
          and new in after[p:p + grown]]
    assert at, "not one insertion of the new line in its place"
    added = after[at[0]:at[0] + grown]
    if "\n" in before and "\r\n" not in before:
        assert "\r" not in added  # an LF file stays LF
    if before.count("\r\n") == before.count("\n") > 0:
        assert added.count("\n") == added.count("\r\n")  # a CRLF file stays CRLF
    assert after.endswith(("\n", "\r")) == before.endswith(("\n", "\r"))


# -- php-fpm pools -------------------------------------------------------------------------------
@st.composite
def pools(draw: st.DrawFn) -> tuple[Built, str]:
    """A php-fpm file [global] [www] [other]; in [www] maybe the line setting memory_limit."""
    eol = draw(EOL)
    mixed = draw(st.booleans())

    def end() -> str:
        return draw(EOL) if mixed else eol

    def filler(n: int) -> list[tuple[str, str]]:
        out = []
        for i in range(draw(st.integers(0, n))):
            kind = draw(st.sampled_from(["comment", "other", "blank"]))
            body = {"comment": ";" + draw(comment_text("php_admin_value[memory_limit] = 1M")),
                    "other": draw(st.sampled_from(["  ", "", "\t"])) + f"php_admin_value[x{i}] = "
                    + draw(VALUE),
                    "blank": draw(st.sampled_from(["", " ", "\t"]))}[kind]
            out.append((body, end()))
        return out

    pieces = [("[global]", end()), *filler(3), ("[www]", end()), *filler(4)]
    target = draw(st.booleans())
    if target:
        lead = draw(st.sampled_from(["", "  ", "\t"]))
        form = draw(st.sampled_from(["php_admin_value[memory_limit] = ", "php_value[memory_limit]=",
                                     "php_admin_value[memory_limit]\t=  "]))
        tail = draw(st.sampled_from(["", " ; why", "\t;x;y", "  ; \u2028odd\x85"]))
        pieces.append((lead + form + draw(VALUE) + tail, end()))
        at = len(pieces) - 1
    pieces += [*filler(4), ("[other]", end()), ("php_admin_value[memory_limit] = 9M", end()),
               *filler(3)]
    text, starts = assemble(pieces, draw(st.booleans()))
    www = starts[[b for b, _ in pieces].index("[www]") + 1]
    other = starts[[b for b, _ in pieces].index("[other]")]
    span = None
    if target:
        body = pieces[at][0]
        span = (starts[at] + len(lead), starts[at] + len(body) - len(tail))
    return Built(text, span, (www, other)), draw(VALUE)


@PROPS
@given(pools())
def test_edit_pool_changes_only_the_setting(case: tuple[Built, str]) -> None:
    built, value = case
    ch = [Change("r", POOL_INI, "memory_limit", value, "")]
    out = applyplan.edit_pool(built.text, "www", ch)
    check_edit(built.text, out, built, f"php_admin_value[memory_limit] = {value}")
    assert applyplan.edit_pool(out, "www", ch) == out


@PROPS
@given(pools(), st.integers(1, 64))
def test_edit_pool_directive_changes_only_the_directive(case: tuple[Built, str], n: int) -> None:
    built, _ = case
    text = built.text.replace("[www]", "[www]\r\n  pm.max_children =  5 \r\n", 1) \
        if "\r\n" in built.text else built.text.replace("[www]", "[www]\n  pm.max_children =  5 \n", 1)
    ch = [Change("p", POOL, "pm.max_children", str(n), "")]
    out = applyplan.edit_pool(text, "www", ch)
    at = text.index("pm.max_children")
    rest = text.index(" \r\n" if "\r\n" in built.text else " \n", at) + 1
    assert out == text[:at] + f"pm.max_children = {n}" + text[rest:]
    assert applyplan.edit_pool(out, "www", ch) == out


# -- ini files -----------------------------------------------------------------------------------
@st.composite
def inis(draw: st.DrawFn) -> tuple[Built, str]:
    eol = draw(EOL)
    pieces = [("; written by statstorm apply", eol)]
    for i in range(draw(st.integers(0, 5))):
        pieces.append((draw(st.sampled_from([";" + draw(comment_text("opcache.memory_consumption=1")),
                                             f"opcache.x{i} = 1", ""])), draw(EOL)))
    target = draw(st.booleans())
    if target:
        lead = draw(st.sampled_from(["", " "]))
        tail = draw(st.sampled_from(["", " ; from the finding", ";"]))
        pieces.append((lead + "opcache.memory_consumption = " + draw(VALUE) + tail, eol))
        at = len(pieces) - 1
    for i in range(draw(st.integers(0, 3))):
        pieces.append((";" + draw(comment_text("opcache.memory_consumption = 2")), draw(EOL)))
    text, starts = assemble(pieces, draw(st.booleans()))
    span = (starts[at] + len(lead), starts[at] + len(pieces[at][0]) - len(tail)) if target \
        else None
    return Built(text, span, (starts[1] if len(starts) > 1 else len(text), len(text))), draw(VALUE)


@PROPS
@given(inis())
def test_edit_ini_changes_only_the_setting(case: tuple[Built, str]) -> None:
    built, value = case
    ch = [Change("m", MASTER_INI, "opcache.memory_consumption", value, "")]
    out = applyplan.edit_ini(built.text, ch)
    check_edit(built.text, out, built, f"opcache.memory_consumption = {value}")
    assert applyplan.edit_ini(out, ch) == out


# -- nginx ---------------------------------------------------------------------------------------
SCRIPT = Change("s", NGINX, "SCRIPT_FILENAME", "$realpath_root$fastcgi_script_name", "")
DOCROOT = Change("s", NGINX, "DOCUMENT_ROOT", "$realpath_root", "")


@st.composite
def nginxes(draw: st.DrawFn) -> tuple[Built, bool]:
    """A server block; the PHP location's line sets SCRIPT_FILENAME from $document_root (or
    only passes to the pool), with other directives and a comment around it on the line."""
    eol = draw(EOL)
    set_here = draw(st.booleans())
    pieces = [("server {", eol)]
    for _ in range(draw(st.integers(0, 4))):
        pieces.append((draw(st.sampled_from([
            "    # " + draw(comment_text("fastcgi_param SCRIPT_FILENAME $document_root$x;")),
            '    add_header X-A "a;b # c {";', "    root /srv/www;", "",
            "    fastcgi_param DOCUMENT_ROOT_X $document_root;"])), draw(EOL)))
    before = draw(st.sampled_from(["", "fastcgi_pass unix:/run/p.sock; ", "include x.conf; "]))
    after = draw(st.sampled_from(["", " fastcgi_param QUERY_STRING $query_string;",
                                  "  # keep; this", " fastcgi_index index.php; # c"]))
    lead = draw(st.sampled_from(["    ", "\t", "  location ~ \\.php$ { "]))
    if set_here:
        word = draw(st.sampled_from(["$document_root$fastcgi_script_name",
                                     '"$document_root$fastcgi_script_name"']))
        line = f"{lead}{before}fastcgi_param  SCRIPT_FILENAME {word};{after}"
    else:
        line = f"{lead}fastcgi_pass unix:/run/p.sock;{after}"
    pieces.append((line, eol))
    at = len(pieces) - 1
    for _ in range(draw(st.integers(0, 3))):
        pieces.append(("    # " + draw(comment_text("fastcgi_pass unix:/run/p.sock;")), draw(EOL)))
    if lead.startswith("  location"):
        pieces.append(("  }", eol))
    pieces.append(("}", eol))
    text, starts = assemble(pieces, draw(st.booleans()))
    if set_here:
        a = starts[at] + line.index(word)
        return Built(text, (a, a + len(word)), (0, 0)), True
    nxt = starts[at + 1] if at + 1 < len(starts) else len(text)
    return Built(text, None, (starts[at] + len(line), nxt)), False


@PROPS
@given(nginxes())
def test_edit_nginx_changes_only_the_value(case: tuple[Built, bool]) -> None:
    built, set_here = case
    change = SCRIPT if set_here else DOCROOT
    out = applyplan.edit_nginx(built.text, [change], "/run/p.sock")
    check_edit(built.text, out, built, SCRIPT.value if set_here else
               "fastcgi_param DOCUMENT_ROOT $realpath_root;")
    assert applyplan.edit_nginx(out, [change], "/run/p.sock") == out
    both = applyplan.edit_nginx(out, [SCRIPT, DOCROOT], "/run/p.sock")
    assert applyplan.edit_nginx(both, [SCRIPT, DOCROOT], "/run/p.sock") == both


# -- /etc/fstab ----------------------------------------------------------------------------------
OPTS = ["defaults", "_netdev", "ro", "noatime", "attribute-timeout=1", "entry-timeout=2",
        "backup-volfile-servers=a:b"]


@st.composite
def fstabs(draw: st.DrawFn) -> tuple[str, str, str, list[str]]:
    eol = draw(EOL)
    sep = st.sampled_from([" ", "\t", "  ", " \t "])
    lines = ["# " + draw(comment_text("vm:/x /srv/code glusterfs defaults 0 0"))
             for _ in range(draw(st.integers(0, 2)))]
    lines += ["#vm:/old /srv/code glusterfs defaults 0 0", "vm:/b /srv/code2 glusterfs defaults 0 0"]
    opts = draw(st.lists(st.sampled_from(OPTS), min_size=1, max_size=5, unique=True))
    tail = draw(st.sampled_from(["", f"{draw(sep)}0", f"{draw(sep)}0{draw(sep)}0"]))
    target = (draw(st.sampled_from(["", " ", "\t"])) + f"vm:/code{draw(sep)}/srv/my\\040code"
              f"{draw(sep)}glusterfs{draw(sep)}" + ",".join(opts) + tail)
    where = draw(st.integers(0, len(lines)))
    lines.insert(where, target)
    more = ["# " + draw(comment_text("vm:/x /srv/my\\040code glusterfs defaults 0 0"))
            for _ in range(draw(st.integers(0, 2)))]
    text, _ = assemble([(ln, eol) for ln in lines + more], draw(st.booleans()))
    return text, target, ",".join(opts), opts


@PROPS
@given(fstabs(), VALUE)
def test_edit_fstab_changes_only_the_options(case: tuple[str, str, str, list[str]],
                                             value: str) -> None:
    text, target, field, opts = case
    ch = [Change("g", MOUNT, "attribute-timeout", value, "", where="/srv/my code"),
          Change("g", MOUNT, "negative-timeout", value, "", where="/srv/my code")]
    want = [f"attribute-timeout={value}" if o.startswith("attribute-timeout=") else o
            for o in opts]
    want += [f"attribute-timeout={value}"] * ("attribute-timeout=1" not in opts)
    want.append(f"negative-timeout={value}")
    out = applyplan.edit_fstab(text, "/srv/my code", ch)
    at = text.index(target) + target.index(field)
    assert out == text[:at] + ",".join(want) + text[at + len(field):]
    assert applyplan.edit_fstab(out, "/srv/my code", ch) == out


# -- an app's configuration file -----------------------------------------------------------------
def test_edit_app_keeps_crlf_separators_and_a_missing_final_newline() -> None:
    text = "<?php\r\n// a\u2028$wgCacheDirectory = 'x';\r\n$wgSitename = 'é\udcff';"
    ch = [Change("a", applyplan.APP, "$wgCacheDirectory", "'/tmp/c'", "", where="/x.php")]
    out = applyplan.edit_app(text, ch)
    assert out == text + "\r\n# statstorm apply\r\n$wgCacheDirectory = '/tmp/c';"
    assert applyplan.edit_app(out, ch) == out


# -- Apache ------------------------------------------------------------------------------------
OVERRIDE = Change("x", applyplan.APACHE, "AllowOverride", "None", "", where="/srv/app")
WORKERS = Change("x", applyplan.APACHE, "MaxRequestWorkers", "12", "", where="")


@st.composite
def apaches(draw: st.DrawFn) -> tuple[Built, str]:
    """An Apache configuration with comments (Unicode separators before look-alike
    directives), another <Directory>, and maybe <Directory "/srv/app/"> with maybe its
    AllowOverride (continued on a second line, or not), or maybe MaxRequestWorkers in an
    <IfModule>. Returns the file and which key ("dir" or "server") is edited."""
    eol = draw(EOL)
    mixed = draw(st.booleans())

    def end() -> str:
        return draw(EOL) if mixed else eol

    def filler(n: int) -> list[tuple[str, str]]:
        return [(draw(st.sampled_from([
            "# " + draw(comment_text("AllowOverride All")),
            "#" + draw(comment_text("MaxRequestWorkers 150")),
            "    Options FollowSymLinks", "", "  ", "Timeout 30"])), end())
            for _ in range(draw(st.integers(0, n)))]

    kind = draw(st.sampled_from(["dir", "server"]))
    pieces = [("ServerRoot /etc/apache2", end()), *filler(3),
              ('<Directory "/srv/other">', end()), ("  AllowOverride All", end()),
              ("</Directory>", end()), *filler(2)]
    target = draw(st.booleans())
    lead = draw(st.sampled_from(["", "  ", "\t", " \f"]))
    cont = draw(st.sampled_from(["", " \\"]))
    first = (lead + ("AllowOverride All" if kind == "dir" else "MaxRequestWorkers 150")
             + draw(st.sampled_from(["", " ", "\t"])) + cont)
    if kind == "dir" and draw(st.booleans()):
        pieces += [(draw(st.sampled_from(['<Directory "/srv/app/">', "<Directory /srv/app>",
                                          '  <directory "/srv/app" >'])), end()), *filler(2)]
        open_at = len(pieces)
        if target:
            pieces.append((first, end()))
            if cont:
                pieces.append(("    FileInfo", end()))
        pieces += [*filler(2), ("</Directory>", end())]
        close_at = len(pieces) - 1
    elif kind == "server":
        pieces += [("<IfModule mpm_event_module>", end()), *filler(1)]
        if target:
            pieces.append((first, end()))
            if cont:
                pieces.append(("    150", end()))
        pieces += [("</IfModule>", end())]
    else:
        target, close_at = False, -1
    pieces += filler(3)
    text, starts = assemble(pieces, draw(st.booleans()))
    bodies = [b for b, _ in pieces]
    if target:
        at = bodies.index(first)
        last = at + (1 if cont else 0)
        return Built(text, (starts[at] + len(lead), starts[last] + len(bodies[last])),
                     (0, 0)), kind
    if kind == "dir" and close_at >= 0:  # inserted before the section's end
        return Built(text, None, (starts[open_at], starts[close_at])), kind
    return Built(text, None, (len(text), len(text))), kind  # appended


@PROPS
@given(apaches())
def test_edit_apache_changes_only_the_directive(case: tuple[Built, str]) -> None:
    built, kind = case
    change = OVERRIDE if kind == "dir" else WORKERS
    out = edit_apache(built.text, [change])
    check_edit(built.text, out, built, f"{change.key} {change.value}")
    assert edit_apache(out, [change]) == out


# -- the real readers on edited files ------------------------------------------------------------
def test_php_fpm_reads_the_edited_pool_as_meant(tmp_path: Path) -> None:
    """php-fpm splits at a lone CR as the editor does (the line behind it is a directive) and
    not at U+2028 (the text behind it stays a comment); the edit keeps CRLF, and php-fpm -t
    accepts the result with the new values and nothing else changed."""
    if not shutil.which("php-fpm8.2"):
        pytest.skip("php-fpm8.2 is not installed")
    conf = tmp_path / "pool.conf"
    text = (f"[global]\r\npid = {tmp_path}/fpm.pid\r\nerror_log = {tmp_path}/err.log\r\n"
            f"[www]\r\nuser = nobody\r\ngroup = nogroup\r\nlisten = {tmp_path}/s.sock\r\n"
            "pm = static\r\n  pm.max_children = 1 ; one for now\r\n"
            "; note\u2028php_admin_value[memory_limit] = 7M\r\n"
            "; c\rphp_admin_value[max_execution_time] = 33\r\n; \xe9\udcff\r\n")
    conf.write_bytes(backups.encode(text))
    before = backups.read_text(conf)
    assert before == text
    out = applyplan.edit_pool(before, "www", [
        Change("a", POOL_INI, "memory_limit", "96M", ""),
        Change("b", POOL_INI, "max_execution_time", "45", ""),
        Change("c", POOL, "pm.max_children", "3", "")])
    assert out.count("\n") == out.count("\r\n")
    assert "; note\u2028php_admin_value[memory_limit] = 7M\r\n" in out
    assert "; c\rphp_admin_value[max_execution_time] = 45\r\n" in out
    assert "  pm.max_children = 3 ; one for now\r\n" in out
    backups.write_file(conf, out)
    res = subprocess.run(["php-fpm8.2", "-tt", "-y", str(conf)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    said = [ln.split("NOTICE: ")[-1].strip() for ln in res.stderr.splitlines()]
    assert {"php_admin_value[memory_limit] = 96M", "php_admin_value[max_execution_time] = 45",
            "pm.max_children = 3"} <= set(said)
    assert "php_admin_value[memory_limit] = 7M" not in said


def test_nginx_accepts_the_edited_config(tmp_path: Path) -> None:
    if not shutil.which("nginx"):
        pytest.skip("nginx is not installed")
    conf = tmp_path / "nginx.conf"
    text = (f"pid {tmp_path}/nginx.pid;\r\nevents {{}}\r\nhttp {{\r\n  server {{\r\n"
            f"    listen unix:{tmp_path}/n.sock;\r\n"
            "    # fastcgi_param SCRIPT_FILENAME $document_root$x;\u2028root /x;\r\n"
            f"    location ~ \\.php$ {{ fastcgi_pass unix:{tmp_path}/s.sock; "
            "fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name; "
            "fastcgi_param QUERY_STRING $query_string; # c\r\n    }\r\n  }\r\n}")
    out = applyplan.edit_nginx(text, [SCRIPT, DOCROOT], f"{tmp_path}/s.sock")
    assert "fastcgi_param SCRIPT_FILENAME $realpath_root$fastcgi_script_name; " \
           "fastcgi_param QUERY_STRING $query_string; # c\r\n" \
           "    fastcgi_param DOCUMENT_ROOT $realpath_root;\r\n" in out
    assert "$document_root$x;\u2028root /x;\r\n" in out and not out.endswith("\n")
    backups.write_file(conf, out)
    res = subprocess.run(["nginx", "-t", "-q", "-c", str(conf), "-p", f"{tmp_path}/",
                          "-e", str(tmp_path / "error.log")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    dump = subprocess.run(["nginx", "-T", "-q", "-c", str(conf), "-p", f"{tmp_path}/",
                           "-e", str(tmp_path / "error.log")], capture_output=True, text=True)
    assert "$realpath_root$fastcgi_script_name" in dump.stdout


def test_findmnt_accepts_the_edited_fstab(tmp_path: Path) -> None:
    if not shutil.which("findmnt"):
        pytest.skip("findmnt is not installed")
    (tmp_path / "code").mkdir()
    fstab = tmp_path / "fstab"
    text = (f"# c\u2028x \x85 \udcff {tmp_path}/code\n"
            f"tmpfs\t{tmp_path}/code  tmpfs  defaults,noatime,attribute-timeout=1  0 0\n")
    out = applyplan.edit_fstab(text, f"{tmp_path}/code", [
        Change("g", MOUNT, "attribute-timeout", "600", ""),
        Change("g", MOUNT, "negative-timeout", "600", "")])
    assert out == text.replace("attribute-timeout=1 ",
                               "attribute-timeout=600,negative-timeout=600 ")
    backups.write_file(fstab, out)
    res = subprocess.run(["findmnt", "--verify", "--tab-file", str(fstab)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert fstab_adapter.verify(Env(), out, [f"{tmp_path}/code"]) == ""  # as apply checks it


def test_apache_accepts_the_edited_config(tmp_path: Path) -> None:
    """Apache reads the edited line (an AllowOverride it refused becomes one it accepts), not
    the look-alike behind U+2028 in a comment; CRLF and the missing final line end stay."""
    if not shutil.which("apache2"):
        pytest.skip("apache2 is not installed")
    mpm = Path("/usr/lib/apache2/modules/mod_mpm_event.so")  # Debian's apache2 package
    if not mpm.exists():
        pytest.skip("apache2's mpm_event module is not where Debian puts it")
    conf = tmp_path / "apache2.conf"
    text = (f"ServerRoot {tmp_path}\r\nListen 127.0.0.1:8089\r\n"
            f"LoadModule mpm_event_module {mpm}\r\nPidFile {tmp_path}/pid\r\n"
            f"ErrorLog {tmp_path}/error.log\r\nServerName localhost\r\n"
            "# old\u2028AllowOverride Bogus\x85\r\n<IfModule mpm_event_module>\r\n"
            "\tMaxRequestWorkers 150 \\\r\n\t\t\r\n</IfModule>\r\n"
            '<Directory "/srv/app/">\r\n  AllowOverride Bogus\r\n</Directory>')
    conf.write_bytes(backups.encode(text))

    def apache_t() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["apache2", "-t", "-f", str(conf)], capture_output=True, text=True)

    assert "Illegal override option Bogus" in apache_t().stderr
    out = edit_apache(backups.read_text(conf), [OVERRIDE, WORKERS])
    assert out == text.replace("  AllowOverride Bogus", "  AllowOverride None").replace(
        "\tMaxRequestWorkers 150 \\\r\n\t\t\r\n", "\tMaxRequestWorkers 12\r\n")
    backups.write_file(conf, out)
    res = apache_t()
    assert res.returncode == 0, res.stderr


# -- all-or-nothing writes -----------------------------------------------------------------------
def only(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()}


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "pool.conf"
    path.write_bytes(b"old\r\n\xff")
    backups.write_file(path, "new\r\n\udcff")
    assert path.read_bytes() == b"new\r\n\xff"  # bytes as they were meant, not re-encoded

    def fail(*_: object) -> None:
        raise OSError(28, "No space left on device")
    for name in ("replace", "fsync"):
        with monkeypatch.context() as m:
            m.setattr(os, name, fail)
            with pytest.raises(OSError):
                backups.write_file(path, "newer")
        assert path.read_bytes() == b"new\r\n\xff" and only(tmp_path) == {"pool.conf"}


@pytest.mark.skipif(not ROOT, reason="root ignores directory permissions: checked as root "
                    "with an immutable directory")
def test_a_read_only_directory_leaves_the_old_file(tmp_path: Path) -> None:
    d = tmp_path / "etc"
    d.mkdir()
    (d / "f.conf").write_text("old\n")
    if subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported on this file system")
    try:
        with pytest.raises(OSError):
            backups.write_file(d / "f.conf", "new\n")
    finally:
        subprocess.run(["chattr", "-i", str(d)], check=True)
    assert (d / "f.conf").read_text() == "old\n" and only(d) == {"f.conf"}


def test_a_failed_backup_set_leaves_nothing(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    env = Env(state_root=tmp_path / "state")
    conf = tmp_path / "pool.conf"
    conf.write_bytes(b"[www]\r\n; \xff\r\n")
    edit = FileEdit(conf, backups.read_text(conf), "[www]\r\n")
    real = backups.write_atomic
    calls = []

    def second_fails(path: Path, *a: object, **k: object) -> None:
        calls.append(path)
        if path.name == backups.MANIFEST:
            raise OSError(28, "No space left on device")
        real(path, *a, **k)  # type: ignore[arg-type]
    monkeypatch.setattr(backups, "write_atomic", second_fails)
    with pytest.raises(UsageError, match="cannot write the backup set .*No space left"):
        backups.save(env, "www", {"pool": "www"}, [edit])
    assert len(calls) == 2 and only(backups.root(env)) == set()
    monkeypatch.setattr(backups, "write_atomic", real)
    d = backups.save(env, "www", {"pool": "www"}, [edit])
    assert only(d) == {"0-pool.conf", backups.MANIFEST}
    assert (d / "0-pool.conf").read_bytes() == b"[www]\r\n; \xff\r\n"
    conf.write_bytes(b"changed")
    with monkeypatch.context() as m:  # a restore that cannot write: one line, old file kept
        m.setattr(os, "replace", lambda *_: (_ for _ in ()).throw(OSError(30, "Read-only")))
        with pytest.raises(ComponentError, match=r"cannot put back .*pool.conf \(Read-only\)"):
            backups.restore(d)
    assert conf.read_bytes() == b"changed" and only(tmp_path) == {"pool.conf", "state"}
    assert backups.restore(d) == [conf] and conf.read_bytes() == b"[www]\r\n; \xff\r\n"


def test_a_file_changed_while_planning_leaves_no_backup_set(tmp_path: Path) -> None:
    env = Env(state_root=tmp_path / "state")
    conf = tmp_path / "pool.conf"
    conf.write_text("a\n")
    with pytest.raises(UsageError, match="changed while apply was planning"):
        backups.save(env, "www", {}, [FileEdit(conf, "b\n", "c\n")])
    assert only(backups.root(env)) == set()


# -- a malformed manifest on --rollback ----------------------------------------------------------
def backup_set(home: Path, manifest: str | None, copy: bool = True) -> Path:
    d = home / "apply" / f"20990101-000000-000000-{unique_name('cfg')}"
    d.mkdir(parents=True)
    if copy:
        (d / "0-pool.conf").write_text("[www]\n")
    good = {"schema": SCHEMA, "created": "x", "status": "applied",
            "target": {"pool": "www", "lab": "cfgedit-nolab", "url": ""},
            "files": [{"path": "/nonexistent/pool.conf", "existed": True, "copy": "0-pool.conf",
                       "mode": 420, "uid": 0, "gid": 0}], "storage": []}
    (d / backups.MANIFEST).write_text(json.dumps(good) if manifest is None else manifest)
    return d


GOOD = None  # backup_set's own well-formed manifest
BAD_MANIFESTS = {
    "bad JSON": ('{"schema": "statstorm.apply/1", "files": [', True, "not JSON"),
    "not an object": ("[1, 2]", True, "not a statstorm.apply/1 manifest"),
    "no status": (json.dumps({"schema": SCHEMA, "target": {}}), True, "no status or target"),
    "files not a list": (json.dumps({"schema": SCHEMA, "status": "applied", "target": {},
                                     "files": {"a": 1}}), True, "must be lists"),
    "relative path": (json.dumps({"schema": SCHEMA, "status": "applied", "target": {},
                                  "files": [{"path": "pool.conf", "existed": True}]}), True,
                      "absolute path"),
    "missing copy": (GOOD, False, "the copy 0-pool.conf of /nonexistent/pool.conf is missing"),
    "bad step": (json.dumps({"schema": SCHEMA, "status": "applied", "target": {}, "files": [],
                             "storage": [{"kind": "mount"}]}), True, "storage step"),
    "bad target": (json.dumps({"schema": SCHEMA, "status": "applied", "target": {"lab": 5},
                               "files": []}), True, "must be text"),
}


@pytest.mark.parametrize("case", sorted(BAD_MANIFESTS))
def test_malformed_manifest_is_checked_whole(tmp_path: Path, case: str) -> None:
    text, copy, why = BAD_MANIFESTS[case]
    d = backup_set(tmp_path, text, copy)
    with pytest.raises(UsageError) as exc:
        backups.newest(Env(state_root=tmp_path))
    msg = str(exc.value)
    assert why in msg and f"move {d} out of" in msg and "\n" not in msg


@pytest.mark.root
@pytest.mark.parametrize("case", ["bad JSON", "missing copy", "files not a list"])
def test_rollback_of_a_malformed_manifest_is_one_line(state_home: Path, case: str) -> None:
    home = state_home / unique_name("cfg")
    text, copy, why = BAD_MANIFESTS[case]
    d = backup_set(home, text, copy)
    res = run_cli(["apply", "--rollback"], home, timeout=120)
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.strip().splitlines()
             if not ln.startswith("statstorm apply: ")]  # its startup line, then the error
    assert len(lines) == 1 and why in lines[0] and "put its files back by hand" in lines[0]
    assert "Traceback" not in res.stderr and only(d) >= {backups.MANIFEST}
    ok = run_cli(["apply", "--rollback", "--json"], home, timeout=120)
    assert json.loads(ok.stdout)["exit"] == 2
    shutil.rmtree(home)


# -- end to end: apply and --rollback on a lab keep every other byte ----------------------------
@pytest.mark.root
def test_apply_and_rollback_on_a_lab_keep_every_other_byte(lab, state_home: Path) -> None:
    """The lab's pool file made CRLF with a comment php-fpm must keep a comment (a non-UTF-8
    byte, a look-alike directive behind U+2028): apply adds the setting and nothing else, the
    backup copy is the file's bytes, and --rollback brings back exactly those bytes."""
    st = lab("--app", "synthetic", "--workers", "1", "--php-ini", "realpath_cache_ttl=2",
             name=unique_name("cfgedit"))
    conf = Path(str(st["state_dir"])) / "conf/php-fpm.conf"
    raw = conf.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    raw += "; caf\xe9 \u2028php_admin_value[realpath_cache_ttl] = 1\r\n".encode() + b"; \xff\r\n"
    conf.write_bytes(raw)
    res = run_cli(["apply", "--lab", str(st["name"]), "realpath-cache-ttl", "--yes", "--json"],
                  state_home)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["mode"] == "applied"
    after = conf.read_bytes()
    grown = len(after) - len(raw)
    at = next(i for i in range(len(raw) + 1) if after[:i] == raw[:i]
              and after[i + grown:] == raw[i:] and b"realpath_cache_ttl] = 600" in after[i:i + grown])
    assert after[at:at + grown].count(b"\n") == after[at:at + grown].count(b"\r\n") > 0
    backup = Path(out["backup"])
    assert raw in [p.read_bytes() for p in backup.iterdir()]
    rb = run_cli(["apply", "--lab", str(st["name"]), "--rollback", "--json"], state_home)
    assert rb.returncode == 0, rb.stderr
    assert conf.read_bytes() == raw
    assert {p.name for p in conf.parent.iterdir() if p.name.startswith(".php-fpm.conf.")} == set()


def test_a_removed_labs_sets_are_retired_not_rolled_back(tmp_path: Path) -> None:
    """`lab down` (and tune's shadow going away) retires the lab's sets: a later
    `apply --rollback` picks the newest set of what still exists."""
    env = Env(state_root=tmp_path)
    pool = backup_set(tmp_path, None)
    gone = backup_set(tmp_path, None)
    gone = gone.rename(gone.with_name("20990102-000000-000000-tune-www"))  # the newer one
    data = json.loads((gone / backups.MANIFEST).read_text())
    data["target"]["lab"] = "tune-www"
    (gone / backups.MANIFEST).write_text(json.dumps(data))
    assert backups.newest(env)[0] == gone  # type: ignore[index]
    assert backups.retire_lab(env, "tune-www") == 1
    assert backups.manifest(gone).status == backups.LAB_REMOVED
    assert backups.newest(env)[0] == pool  # type: ignore[index]
    assert backups.retire_lab(env, "tune-www") == 0


def test_set_owner_keeps_a_file_systems_own_owner(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """afsd.fuse answers chown with ENOSYS (AFS keeps owners of its own): apply's writes and
    rollback keep the owner the file system gives; any other chown error still stops them."""
    import errno
    import os

    from statstorm.results import common
    f = tmp_path / "LocalSettings.php"
    f.write_text("x")
    st = f.stat()
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(common.os, "geteuid", lambda: 0)

    def chown(path: object, uid: int, gid: int, err: int = errno.ENOSYS) -> None:
        calls.append((uid, gid))
        raise OSError(err, os.strerror(err))
    monkeypatch.setattr(common.os, "chown", chown)
    common.set_owner(f, st.st_uid, st.st_gid)  # already its owner: no call
    assert calls == []
    common.set_owner(f, st.st_uid + 1, st.st_gid)  # ENOSYS: kept as it is
    assert calls == [(st.st_uid + 1, st.st_gid)]
    monkeypatch.setattr(common.os, "chown",
                        lambda p, u, g: chown(p, u, g, errno.EPERM))
    with pytest.raises(PermissionError):
        common.set_owner(f, st.st_uid + 1, st.st_gid)
    common.write_atomic(f, "y", like=os.stat_result((*st[:4], st.st_uid, *st[5:])))
    assert f.read_text() == "y"
