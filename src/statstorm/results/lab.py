"""The state of one lab, as written to `<state dir>/lab.json` by `statstorm lab up` and
printed by `statstorm lab status --json` (with its live worker PIDs)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from statstorm.results import jsonread as jr
from statstorm.results.jsontypes import JsonObject, JsonValue
from statstorm.results.common import known_fields

KIND = "lab"
VERSION = 1
SCHEMA = f"statstorm.{KIND}/{VERSION}"


@dataclass(frozen=True)
class LabState:
    """Everything `lab up` started, recorded as it starts it, so `lab down` can undo it.

    Fields are filled step by step, each step a new value written at once
    (adapters/labs/state.py `LabRecord`); a field still empty means that step never ran.
    """

    name: str
    app: str
    storage: str
    port: int
    workers: int
    state_dir: str
    # The serving architecture: nginx + php-fpm, or Apache with an MPM and a PHP handler
    # (fpm | mod_php | fcgid). Labs written before Apache labs read as nginx + fpm.
    server: str = "nginx"
    mpm: str = ""  # event | worker | prefork (Apache only)
    handler: str = "fpm"
    allow_override: str = ""  # Apache's AllowOverride for the docroot: None | All
    php_ini: dict[str, str] = field(default_factory=dict)  # the overrides given to the master
    # read back with `php-fpm -i`, or from phpinfo() under mod_php and fcgid
    effective_ini: dict[str, str] = field(default_factory=dict)
    mount_options: dict[str, str] = field(default_factory=dict)
    phase: str = "starting"  # starting | up | failed
    url: str = ""
    pool: str = ""  # the php-fpm pool; '' when Apache runs PHP itself (mod_php, fcgid)
    code_path: str = ""
    docroot: str = ""
    entry_path: str = ""  # the page `lab up` checks, e.g. /index.php?title=Main_Page
    fpm_binary: str = ""
    fpm_master_pid: int = 0
    fpm_socket: str = ""
    nginx_pid: int = 0
    apache_pid: int = 0  # the lab's apache2 master
    php_cgi_binary: str = ""  # fcgid: the php-cgi that mod_fcgid starts
    # WordPress: the lab's own mariadbd (data in <state dir>/data/mysql) and its socket
    mariadb_pid: int = 0
    db_socket: str = ""
    # GlusterFS
    volume: str = ""
    brick: str = ""
    mount_point: str = ""
    fuse_client_pid: int = 0
    started_glusterd: bool = False
    # `--storage-delay`: µs added to each round trip to the storage (0: none; model/storage_delay.py)
    storage_delay_us: int = 0
    # Live fields (filled by `status`, not stored): worker PIDs change when workers recycle.
    # The processes running PHP: php-fpm's workers, Apache's children (mod_php) or the
    # php-cgi processes mod_fcgid started so far (it starts them on demand).
    worker_pids: tuple[int, ...] = ()
    # PHP: its version ("8.2" the host's own; '' in labs written before versions), and for
    # another version the root its php-fpm runs chrooted in (results/php_root.py) and the
    # mounts the lab made there, in order (`lab down` unmounts them, last first).
    php_version: str = ""
    php_root: str = ""
    root_mounts: list[str] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        data = asdict(self)
        data["worker_pids"] = list(self.worker_pids)
        data["schema"] = SCHEMA
        return data

    @classmethod
    def from_json(cls, data: JsonValue) -> LabState:
        """A lab.json as written (fields a newer statstorm added read as their defaults)."""
        d = jr.obj(data, "LabState")
        return cls(**{**known_fields(cls, d),
                      "worker_pids": tuple(jr.integer(p, "worker_pids")
                                           for p in jr.lst(d, "worker_pids"))})
