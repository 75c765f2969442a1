"""APCu, the local object cache PHP apps keep their own caches in, loaded for one pool.

statstorm does not install APCu system-wide (Debian's php8.2-apcu package enables it for
every SAPI and pool): `scripts/setup.sh` unpacks the package's `apcu.so` into statstorm's
own directory, and `statstorm apply` loads it into the one pool that needs it with
`php_admin_value[extension] = PATH` (php-fpm loads an extension given there into that pool's
workers only). Where the system already has APCu, that copy is used.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

OWN_DIR = Path("/opt/statstorm/php")
SO = "apcu.so"


def extension_path(php_api: str = "") -> str:
    """The apcu.so to load: the system's (php8.2-apcu installed) or statstorm's own copy for
    this PHP API (e.g. 20220829); '' when there is none."""
    apis = [php_api] if php_api else sorted(
        (Path(p).name for p in glob.glob("/usr/lib/php/20*")), reverse=True)
    for api in apis:
        for base in (Path("/usr/lib/php") / api, OWN_DIR / api):
            path = base / SO
            if path.is_file() and os.access(path, os.R_OK):
                return str(path)
    return ""


def install_hint() -> str:
    return ("APCu is not available: run scripts/setup.sh (it unpacks php8.2-apcu's apcu.so into "
            f"{OWN_DIR}) or install php8.2-apcu")
