"""glusterfs-content-caching: GlusterFS's content caches (quick-read's revalidation period and
invalidation; the FUSE client's fopen-keep-cache offered as a comment), the tier after the
metadata caches. The rule on fixed facts, its change as apply reads it, the flag's translation
for the client and fstab. Pure, no root."""

from __future__ import annotations

import dataclasses

from test_check_rules import facts, ids

from statstorm.adapters.apply import storage_steps
from statstorm.model import applyplan
from statstorm.model.checkfacts import MountFact, TraceFacts
from statstorm.model.config_edit import fstab_options
from statstorm.model.rules_gluster import MEASURE_FIRST, RULE_ID

MD_TIER = {"attribute-timeout": "600", "entry-timeout": "600", "negative-timeout": "600"}
MD_VOLUME = {"performance.md-cache-timeout": "600", "performance.nl-cache": "on",
             "performance.quick-read": "on", "performance.qr-cache-timeout": "1",
             "performance.quick-read-cache-invalidation": "false"}
G = MountFact(role="docroot", path="/mnt/gv/app", mount_point="/mnt/gv", fstype="fuse.glusterfs",
              kind="glusterfs-fuse", volume="vol0", cache_options=dict(MD_TIER),
              volume_options=dict(MD_VOLUME))
DATA = TraceFacts(requests=10, detail="events", per_request={"total": 40.0},
                  data_opens_per_request=11.0,
                  data_open_examples=(("/mnt/gv/app/extensions/Cite/extension.json", 1.0),
                                      ("/var/data/cache.sqlite", 3.0)),
                  round_trips_per_request=22.2)


def test_fires_after_the_metadata_tier_with_its_changes_volume_first() -> None:
    f = ids(facts(mounts=(G,)))[RULE_ID]
    assert f.severity == "info" and "measure first" in f.title
    assert f.change[:2] == ("gluster volume set vol0 performance.qr-cache-timeout 600",
                            "gluster volume set vol0 performance.quick-read-cache-invalidation on")
    assert len(f.change) == 3 and f.change[2].startswith("# optional") \
        and "fopen-keep-cache" in f.change[2]
    text = " ".join(f.evidence)
    assert "qr-cache-timeout = 1 s" in text and "without fopen-keep-cache" in text
    assert "no trace given" in text
    assert f.predicted_gain is None and "measure first" in f.gain_note
    assert "stale" in f.tradeoff and RULE_ID in MEASURE_FIRST


def test_trace_evidence_names_the_data_files_on_this_mount() -> None:
    f = ids(facts(mounts=(G,), trace=DATA))[RULE_ID]
    text = " ".join(f.evidence)
    assert "11 non-PHP files opened per request" in text and "extension.json (1/req)" in text
    assert "cache.sqlite" not in text  # not on this mount
    assert "22.2 network round trips per request" in text


def test_silent_before_the_metadata_tier_and_without_data_opens() -> None:
    short = dataclasses.replace(G, cache_options={**MD_TIER, "negative-timeout": "0"})
    found = ids(facts(mounts=(short,)))
    assert RULE_ID not in found and "glusterfs-mount-caching" in found
    no_md = dataclasses.replace(G, volume_options={**MD_VOLUME, "performance.md-cache-timeout": "1"})
    assert RULE_ID not in ids(facts(mounts=(no_md,)))
    quiet = dataclasses.replace(DATA, data_opens_per_request=0.5, data_open_examples=())
    assert RULE_ID not in ids(facts(mounts=(G,), trace=quiet))


def test_silent_when_the_content_caches_are_on() -> None:
    done = dataclasses.replace(
        G, cache_options={**MD_TIER, "fopen-keep-cache": "true"},
        volume_options={**MD_VOLUME, "performance.qr-cache-timeout": "600",
                        "performance.quick-read-cache-invalidation": "on"})
    assert RULE_ID not in ids(facts(mounts=(done,), trace=DATA))
    only_mount = dataclasses.replace(done, cache_options=dict(MD_TIER))
    assert RULE_ID not in ids(facts(mounts=(only_mount,)))  # the flag alone: no finding
    unread = dataclasses.replace(G, volume_options={})
    assert RULE_ID not in ids(facts(mounts=(unread,)))
    qr_off = dataclasses.replace(done, volume_options={**done.volume_options,
                                                       "performance.quick-read": "off"})
    f = ids(facts(mounts=(qr_off,)))[RULE_ID]
    assert f.change == ("gluster volume set vol0 performance.quick-read on",)  # flag is on


def test_apply_reads_the_change_and_leaves_it_out_of_all() -> None:
    f = ids(facts(mounts=(G,)))[RULE_ID]
    changes = applyplan.classify(f)
    assert [(c.kind, c.where, c.key, c.value) for c in changes] == [
        (applyplan.VOLUME, "vol0", "performance.qr-cache-timeout", "600"),
        (applyplan.VOLUME, "vol0", "performance.quick-read-cache-invalidation", "on")]
    assert RULE_ID in applyplan.NAMED_ONLY and "measured" in applyplan.NAMED_ONLY[RULE_ID]


def test_the_flag_is_bare_in_fstab_and_true_for_the_client() -> None:
    # mount.glusterfs turns `fopen-keep-cache=on` into `--fopen-keep-cache==on`, which the
    # client refuses: fstab keeps the bare flag, the stacked client gets what mount gives it
    assert fstab_options("defaults,_netdev,attribute-timeout=600", {"fopen-keep-cache": ""}) \
        == "defaults,_netdev,attribute-timeout=600,fopen-keep-cache"
    assert storage_steps.client_options({"fopen-keep-cache": "", "entry-timeout": "600"}) \
        == {"fopen-keep-cache": "true", "entry-timeout": "600"}
