"""`statstorm/bpf/php_layout.c` compiled against one PHP version's headers and run: the
#define lines of the layout the compiled tracer reads that PHP with. The standard library
only: scripts/php_layouts.py runs it at package time with Debian's python3 alone, and
adapters/tracing/php_layouts.py for a PHP root's own headers."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

PROGRAM = Path(__file__).resolve().parents[2] / "bpf" / "php_layout.c"
DEFINE = re.compile(r'^#define PHP_(\w+) "?([^"]*)"?$')
MADE_FROM = re.compile(r"from the PHP (\S+) headers")


class NoLayout(Exception):
    """The headers give no layout (the message says why)."""


def printed(headers: Path, what: str) -> str:
    """php_layout.c compiled against the PHP headers in `headers` (…/include/php/API) and
    run: what it prints. `what` names the headers in the NoLayout raised when there is no
    compiler, they do not compile it, or they are of a thread-safe (ZTS) PHP."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise NoLayout(f"no C compiler (cc) to read {what} with")
    with tempfile.TemporaryDirectory(prefix="statstorm-layout-") as tmp:
        exe = Path(tmp) / "php_layout"
        flags = [f"-I{headers / d}" if d else f"-I{headers}" for d in ("", "main", "Zend", "TSRM")]
        built = subprocess.run([cc, "-w", *flags, str(PROGRAM), "-o", str(exe)],
                               capture_output=True, text=True, check=False)
        if built.returncode != 0:
            why = (built.stderr.strip().splitlines() or ["?"])[0]
            raise NoLayout(f"{what} do not compile php_layout.c ({why})")
        ran = subprocess.run([str(exe)], capture_output=True, text=True, check=False)
        if ran.returncode != 0:
            raise NoLayout(f"{what} are of a thread-safe (ZTS) PHP, whose globals the tracer "
                           "cannot find")
        return ran.stdout


def fields(text: str) -> dict[str, str]:
    """The layout's fields in what php_layout.c printed, in order (BUILD_ID among them)."""
    return {m.group(1): m.group(2) for m in map(DEFINE.match, text.splitlines()) if m}


def made_from(text: str) -> str:
    """The PHP version of the headers what php_layout.c printed was made from ('' unsaid)."""
    m = MADE_FROM.search(text)
    return m.group(1) if m else ""


__all__ = ["DEFINE", "NoLayout", "PROGRAM", "fields", "made_from", "printed"]
