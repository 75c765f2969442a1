"""The core is typed (py.typed): mypy --strict passes on the package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_mypy_strict() -> None:
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
