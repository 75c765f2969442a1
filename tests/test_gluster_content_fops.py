"""Which GlusterFS content options cut the brick's FOPs per request of an app that reads its
data files (DokuWiki on a stock host, tests/stock_host.py), with the md-cache tier in place:
each option set alone, the same sequential page views counted on the brick (the volume's
profile, adapters/storage/gluster_profile.py), not timed. Prints the table the rules of
model/rules_gluster.py rest on (docs/check.md, glusterfs-content-caching)."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import pytest

from statstorm.adapters.storage import gluster, gluster_profile
from statstorm.env import Env
from stock_host import StockHost, php_site, stock_host

pytestmark = [pytest.mark.root, pytest.mark.slow]

PORT = 18193
URL = f"http://127.0.0.1:{PORT}/doku.php"
VIEWS = 30
MD_TIER = {"performance.md-cache-timeout": "600", "performance.nl-cache": "on",
           "features.cache-invalidation": "on", "performance.cache-invalidation": "on",
           "performance.stat-prefetch": "on"}
MOUNT_TIER = "attribute-timeout=600,entry-timeout=600,negative-timeout=600"
# each variant alone on top of the md-cache tier: volume options (set live), or a mount option
VARIANTS: dict[str, dict[str, str]] = {
    "md-cache tier only": {},
    "quick-read 600 s": {"performance.quick-read": "on", "performance.qr-cache-timeout": "600",
                         "performance.quick-read-cache-invalidation": "on"},
    "io-cache": {"performance.io-cache": "on", "performance.cache-refresh-timeout": "60"},
    "open-behind off": {"performance.open-behind": "off"},
    "readdir-ahead": {"performance.readdir-ahead": "on"},
}
KEEP_CACHE = "fopen-keep-cache"


def _set(volume: str, options: dict[str, str]) -> None:
    for key, value in options.items():
        subprocess.run(["gluster", "volume", "set", volume, key, value], check=True,
                       capture_output=True, timeout=60)


def _reset(volume: str, options: dict[str, str]) -> None:
    for key in options:
        subprocess.run(["gluster", "volume", "reset", volume, key], check=True,
                       capture_output=True, timeout=60)


def _mount(host: StockHost, mount_point: Path, options: str) -> None:
    mount_point.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "glusterfs", "-o", options,
                    f"{gluster.brick_host()}:/{host.volume}", str(mount_point)], check=True,
                   timeout=60)
    host.mounts.append(mount_point)


def _umount(host: StockHost, mount_point: Path) -> None:
    subprocess.run(["umount", str(mount_point)], check=True, timeout=60)
    host.mounts.remove(mount_point)


def _per_view(volume: str) -> dict[str, float]:
    env = Env()
    for _ in range(5):  # warm: OPcache, the realpath cache, the client's caches
        urllib.request.urlopen(URL, timeout=20).read()
    before = gluster_profile.info(env, volume)
    for _ in range(VIEWS):
        urllib.request.urlopen(URL, timeout=20).read()
    calls = gluster_profile.delta(before, gluster_profile.info(env, volume))
    out = {k: round(v / VIEWS, 2) for k, v in sorted(calls.items()) if v}
    out["ROUND_TRIPS"] = round(gluster_profile.round_trips(calls) / VIEWS, 2)
    return out


def test_brick_fops_per_view_with_each_content_option(tmp_path: Path) -> None:
    with stock_host() as host:
        volume = host.gluster_volume()
        _set(volume, MD_TIER)
        net = host.scratch("net")
        _mount(host, net, MOUNT_TIER)
        code = host.copy_app("dokuwiki", net / "dokuwiki")
        host.nginx_site("doku-fops", php_site(PORT, code))
        host.fpm_start("init")
        host.nginx_start()
        gluster_profile.start(Env(), volume)
        table: dict[str, dict[str, float]] = {}
        for name, options in VARIANTS.items():
            _set(volume, options)
            table[name] = _per_view(volume)
            _reset(volume, options)
        _umount(host, net)
        _mount(host, net, f"{MOUNT_TIER},{KEEP_CACHE}")
        table[KEEP_CACHE] = _per_view(volume)
        gluster_profile.stop(Env(), volume)
        fops = sorted({k for row in table.values() for k in row})
        print(f"\nbrick FOPs per view of doku.php ({VIEWS} views, md-cache tier in place)")
        print("variant".ljust(22) + "".join(f.rjust(12) for f in fops))
        for name, row in table.items():
            print(name.ljust(22) + "".join(f"{row.get(f, 0):>12g}" for f in fops))
        base = table["md-cache tier only"]["ROUND_TRIPS"]
        assert base > 0, table  # DokuWiki reads its data files through the client
