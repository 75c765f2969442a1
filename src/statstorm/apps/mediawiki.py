"""MediaWiki from the Debian package, installed for the lab with SQLite.

The code tree is the package's `/usr/share/mediawiki` copied with symlinks resolved (so it
can move to any storage); the SQLite database and MediaWiki's caches stay on local disk in
the lab's data directory, so only the code moves when the storage changes. The tree is copied
by adapters/labs/lab_apps.py (apps/ imports no adapter).
"""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError

SOURCE = Path("/usr/share/mediawiki")
PACKAGES = ("mediawiki",)  # the Debian packages its tree comes from (its cache key)
# Dangling in the package (they point into /var/lib/mediawiki and /etc/mediawiki) or only
# reachable through the resolved `extensions/` symlinks.
EXCLUDES = ("./extensions-core", "./LocalSettings.php", "./images", "./config")
EXTENSIONS = "ParserFunctions,Cite,CategoryTree,Gadgets,InputBox,Poem,WikiEditor,Interwiki"
SKINS = "Vector,MonoBook,Timeless"
ENTRY = "/index.php?title=Main_Page"
API = "/api.php?action=query&meta=siteinfo&format=json"
PAGE_MARKERS = ('id="mw-content-text"', "Main Page")


def require_installed() -> None:
    if not (SOURCE / "index.php").exists():
        raise DependencyError("the mediawiki package is not installed: run scripts/setup.sh --lab as root")


def version() -> str:
    text = (SOURCE / "includes/Defines.php").read_text(errors="replace")
    for line in text.splitlines():
        if "MW_VERSION" in line and "define(" in line:
            return line.split("'")[3] if line.count("'") >= 4 else line
    return "unknown"


def install(env: Env, php: str, code: Path, data: Path, port: int) -> None:
    """Run MediaWiki's installer (SQLite in `data`) and write LocalSettings.php into `code`.

    The installer runs against `code` itself so the generated LocalSettings.php is the one
    MediaWiki would write; then the lab's settings are appended (the same as the published
    lab baseline: no object or parser cache, so each view runs real code).
    """
    data.mkdir(parents=True, exist_ok=True)
    (data / "cache").mkdir(exist_ok=True)
    env.run([php, "maintenance/install.php", "--dbtype", "sqlite", "--dbpath", str(data),
             "--dbname", "labwiki", "--server", f"http://127.0.0.1:{port}", "--scriptpath", "",
             "--lang", "en", "--pass", secrets.token_urlsafe(16) + "-Aa1",
             "--extensions", EXTENSIONS, "--skins", SKINS, "LabWiki", "Admin"],
            cwd=code, timeout=300, what="MediaWiki install.php")
    settings = code / "LocalSettings.php"
    if not settings.exists():
        raise ComponentError("MediaWiki install.php wrote no LocalSettings.php")
    with settings.open("a") as fh:
        fh.write(
            "\n# --- statstorm lab ---\n"
            "$wgServer = \"http://127.0.0.1:\" . ( $_SERVER['SERVER_PORT'] ?? " f"{port} );\n"
            f"$wgCacheDirectory = \"{data}/cache\";\n"
            "$wgLocalisationCacheConf['store'] = 'files';\n"
            "$wgMainCacheType = CACHE_NONE;\n"
            "$wgParserCacheType = CACHE_NONE;\n"
            "$wgMessageCacheType = CACHE_NONE;\n"
            "$wgSessionCacheType = CACHE_DB;\n"
            "$wgJobRunRate = 0;\n"
        )
    env.run([php, "maintenance/rebuildLocalisationCache.php", "--force", "--lang", "en"],
            cwd=code, timeout=300, what="MediaWiki rebuildLocalisationCache.php")
    shutil.chown(data, "www-data", "www-data")
    for path in data.rglob("*"):
        shutil.chown(path, "www-data", "www-data")
