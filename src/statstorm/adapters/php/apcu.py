"""APCu, the local object cache PHP apps keep their own caches in, loaded for one pool.

statstorm does not install APCu system-wide (Debian's phpX.Y-apcu package enables it for
every SAPI and pool): `scripts/setup.sh --lab` unpacks the package's `apcu.so` into statstorm's
own directory, and `statstorm apply` loads it into the one pool that needs it with
`php_admin_value[extension] = PATH` (php-fpm loads an extension given there into that pool's
workers only). Where the system already has APCu, that copy is used.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

from statstorm.results.php_root import HOST_VERSION

OWN_DIR = Path("/opt/statstorm/php")
SO = "apcu.so"


def extension_path(php_api: str = "", root: str = "") -> str:
    """The apcu.so to load: the system's (the phpX.Y-apcu package installed) or statstorm's
    own copy for this PHP API (e.g. 20220829); '' when there is none. `root`: a PHP root
    (`lab up --php 8.4`): only its own /usr/lib/php counts (the path given is the one its
    processes see)."""
    lib = Path(root + "/usr/lib/php") if root else Path("/usr/lib/php")
    apis = [php_api] if php_api else sorted(
        (Path(p).name for p in glob.glob(f"{lib}/20*")), reverse=True)
    for api in apis:
        for base in ((lib / api,) if root else (lib / api, OWN_DIR / api)):
            path = base / SO
            if path.is_file() and os.access(path, os.R_OK):
                return "/" + str(path.relative_to(root)) if root else str(path)
    return ""


def install_hint(version: str = HOST_VERSION) -> str:
    return (f"APCu is not available: run scripts/setup.sh --lab (it unpacks php{version}-apcu's "
            f"apcu.so into {OWN_DIR}) or install php{version}-apcu")
