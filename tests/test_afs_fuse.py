"""afsd.fuse's FUSE timeouts without a cell: read from its command line, given back as one
`-o` word beside its cache sizes, and the `openafs-fuse-timeouts` rule on facts (golden:
tests/fixtures/afs/finding-fuse-timeouts.expected.json). The lab test:
tests/test_lab_fuseclients.py."""

from __future__ import annotations

import json
from pathlib import Path

from statstorm.adapters.storage import afs_client, afs_options
from statstorm.model import afs_fuse, applyplan, escalation, rules_afs, storage_kinds
from statstorm.model.checkfacts import Facts, MountFact, TraceFacts
from statstorm.results.storage_kind import StorageKind

GOLDEN = Path(__file__).parent / "fixtures" / "afs" / "finding-fuse-timeouts.expected.json"
LAB_ARGV = ["/usr/sbin/afsd.fuse", "-confdir", "/x/client", "-cachedir", "/x/cache", "-dynroot",
            "-fakestat", "-osubtype=afs", "-mountdir", "/x/mnt"]


def test_timeouts_from_a_command_line() -> None:
    assert afs_fuse.timeouts(LAB_ARGV) == {}
    assert afs_fuse.effective(LAB_ARGV) == {"attr-timeout": "1", "entry-timeout": "1",
                                            "negative-timeout": "0"}
    argv = [*LAB_ARGV[:-2], "-oattr_timeout=60,entry_timeout=30", "-o", "negative_timeout=5",
            *LAB_ARGV[-2:]]
    assert afs_fuse.effective(argv) == {"attr-timeout": "60", "entry-timeout": "30",
                                        "negative-timeout": "5"}


def test_the_timeouts_are_one_word_beside_the_cache_sizes() -> None:
    word = "-onegative_timeout=60"
    assert afs_fuse.is_timeout_word(word) and not afs_fuse.is_timeout_word("-osubtype=afs")
    want = afs_fuse.short(afs_fuse.effective(LAB_ARGV))
    assert want == {"negative-timeout": "60"}  # the one that measured a gain
    args = afs_client.with_sizes(("-stat", "3000"), want)
    assert args == ("-stat", "3000", word)
    argv = [*LAB_ARGV[:-2], *args, *LAB_ARGV[-2:]]
    assert afs_client.size_args(argv) == args  # what apply checks the restarted client by
    # a size changed later keeps the timeouts; a timeout changed later keeps the sizes
    assert afs_client.with_sizes(args, {"stat": "4096"}) == ("-stat", "4096", word)
    assert afs_client.with_sizes(args, {"attr-timeout": "5"}) == (
        "-stat", "3000", "-oattr_timeout=5,negative_timeout=60")
    assert afs_client.with_sizes(("-stat", "50"), {}) == ("-stat", "50")


def test_the_mount_shows_its_timeouts(tmp_path: Path) -> None:
    (tmp_path / "cacheinfo").write_text("/afs:/var/cache/openafs:50000\n")
    argv = ["/usr/sbin/afsd.fuse", "-confdir", str(tmp_path), "-oattr_timeout=60",
            "-mountdir", "/x/mnt"]
    c = afs_options.cache_options(argv)
    assert c["stat"] == "3000" and c["attr-timeout"] == "60" and c["negative-timeout"] == "0"
    kernel = afs_options.cache_options(["/usr/sbin/afsd", "-confdir", str(tmp_path)])
    assert "attr-timeout" not in kernel  # the kernel's client has no FUSE timeouts
    keys = storage_kinds.STORAGE[StorageKind.OPENAFS].cache_keys
    assert all(k in keys for k in afs_fuse.TIMEOUT_KEYS)


def _facts(argv: list[str], client: str = "afsd.fuse", trace: TraceFacts | None = None
           ) -> Facts:
    cache = {"client": client, "stat": "3000", **(afs_fuse.effective(argv)
                                                   if client == "afsd.fuse" else {})}
    m = MountFact("docroot", "/srv/afs/statstorm.lab/app", "/srv/afs", "fuse.afs", "openafs",
                  cache_options=cache)
    return Facts(pool="www", settings={}, mounts=(m,), tree_entries=645, trace=trace)


def test_the_rule_golden() -> None:
    t = TraceFacts(requests=10, detail="events", per_request={}, round_trips_per_request=0.0)
    [f] = rules_afs.openafs_fuse_timeouts(_facts(LAB_ARGV, trace=t))
    assert json.loads(GOLDEN.read_text()) == f.to_json()


def test_the_rule_asks_only_for_what_is_short_and_only_of_afsd_fuse() -> None:
    assert rules_afs.openafs_fuse_timeouts(_facts([*LAB_ARGV, "-onegative_timeout=60"])) == []
    part = [*LAB_ARGV, "-oattr_timeout=120,negative_timeout=5"]
    [f] = rules_afs.openafs_fuse_timeouts(_facts(part))
    assert f.change[:2] == ("# mount options for /srv/afs:", "negative-timeout=60")
    assert f.change[2].startswith(
        "# afsd.fuse's argument: -oattr_timeout=120,negative_timeout=60 (")
    assert rules_afs.openafs_fuse_timeouts(_facts(LAB_ARGV, client="afsd")) == []


def test_apply_places_it_on_the_mount_and_leaves_it_out_of_all() -> None:
    [f] = rules_afs.openafs_fuse_timeouts(_facts(LAB_ARGV))
    f = f.__class__(**{**f.__dict__, "id": rules_afs.TIMEOUTS_ID})
    changes = applyplan.classify(f)
    assert [(c.kind, c.key, c.value, c.where) for c in changes] == [
        ("mount", "negative-timeout", "60", "/srv/afs")]
    assert rules_afs.TIMEOUTS_ID in applyplan.NAMED_ONLY


def test_tune_tries_it_only_where_check_proposed_it() -> None:
    tried, skipped = escalation.plan([rules_afs.TIMEOUTS_ID, "opcache-timestamps-off"])
    assert tried == [rules_afs.TIMEOUTS_ID, "opcache-timestamps-off"]  # the cheaper first
    assert rules_afs.TIMEOUTS_ID not in [s for s, _ in skipped]
    tried, skipped = escalation.plan(["opcache-timestamps-off"])
    assert rules_afs.TIMEOUTS_ID not in tried + [s for s, _ in skipped]
    assert "unseen up to 60 s" in escalation.price(rules_afs.TIMEOUTS_ID, "--pool www")
