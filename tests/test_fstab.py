"""apply's /etc/fstab edits on fstab files written the way Debian and admins write them
(`fixtures/fstab/<case>.fstab` beside the expected `<case>.expected`): the mount's options
change in its own line, or a line is added for a mount made by hand, and every other byte
stays; a malformed file is refused in one line and nothing is written; `findmnt --verify`
(the real one) judges the result before apply writes it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from statstorm.adapters.apply.pool_config import Target
from statstorm.adapters.storage import fstab
from statstorm.adapters.storage.mounts import MountEntry
from statstorm.commands import apply as apply_cmd
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.model import fstab_edit
from statstorm.results.apply import MOUNT, ApplyMode, StorageStep

FIXTURES = Path(__file__).parent / "fixtures" / "fstab"
NEW = {"attribute-timeout": "600", "entry-timeout": "600", "negative-timeout": "600"}
# what /proc/mounts shows for a GlusterFS FUSE mount made by hand (no fstab line)
HAND = MountEntry("gluster1:www", "/srv/www", "fuse.glusterfs",
                  "rw,relatime,user_id=0,group_id=0,default_permissions,allow_other")

CASES = [  # case, mount point
    ("debian", "/srv/www"),  # Debian's default fstab, the mount made by hand: a line added
    ("glusterfs", "/srv/www"),  # tabs, LABEL=, a nested mount, options kept in place
    ("escapes", "/srv/my site code"),  # \040 in mount points, a commented look-alike
    ("defaults", "/srv/www"),  # `defaults` only, CRLF, no final line end
    ("three-fields", "/srv/www"),  # no options field at all
]


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    """The lines that differ (None-padded): every other line byte for byte the same."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    a += [""] * (len(b) - len(a))
    return [(x, y) for x, y in zip(a, b) if x != y]


@pytest.mark.parametrize("case,mount_point", CASES)
def test_golden_edit_keeps_every_other_byte(case: str, mount_point: str, tmp_path: Path) -> None:
    path = tmp_path / "fstab"
    shutil.copyfile(FIXTURES / f"{case}.fstab", path)
    original = path.read_bytes()
    live = {"attribute-timeout": "1", "negative-timeout": "0"}
    edit = fstab.plan(path, [fstab.Persist(mount_point, dict(NEW), live)], entries=[HAND])
    assert edit is not None and edit.before == original.decode()
    assert edit.after.encode() == (FIXTURES / f"{case}.expected").read_bytes()
    assert path.read_bytes() == original  # planning writes nothing
    changed = changed_lines(edit.before, edit.after)
    added = edit.before and not edit.before.endswith("\n")  # the last line gets its end
    assert len(changed) == (2 + bool(added) if case == "debian" else 1), changed
    # the edit is made once: planned again on its own result, nothing changes
    path.write_text(edit.after)
    assert fstab.plan(path, [fstab.Persist(mount_point, dict(NEW), live)], entries=[]) is None


def test_added_line_for_a_mount_made_by_hand() -> None:
    text = (FIXTURES / "debian.fstab").read_text()
    out = fstab_edit.add_line(text, "gluster1:www", "/srv/my site", "fuse.glusterfs", NEW)
    assert out.startswith(text)
    comment, line = out[len(text):].splitlines()
    assert comment.startswith("# added by statstorm apply: /srv/my\\040site")
    assert line == ("gluster1:/www /srv/my\\040site glusterfs defaults,_netdev,"
                    "attribute-timeout=600,entry-timeout=600,negative-timeout=600 0 0")
    entry = fstab_edit.find(out, lambda t: t == "/srv/my site")
    assert entry is not None and entry.source == "gluster1:/www" and entry.fstype == "glusterfs"
    assert fstab_edit.add_line("", "nfs:/e", "/mnt", "nfs4", {}) == (
        "# added by statstorm apply: /mnt keeps its new cache options after a reboot\n"
        "nfs:/e /mnt nfs4 defaults,_netdev 0 0\n")


def test_missing_fstab_is_created(tmp_path: Path) -> None:
    edit = fstab.plan(tmp_path / "fstab", [fstab.Persist("/srv/www", dict(NEW))], entries=[HAND])
    assert edit is not None and edit.before is None  # the backup set records: did not exist
    assert edit.after.splitlines()[1].startswith("gluster1:/www /srv/www glusterfs ")


def test_malformed_fstab_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "fstab"
    shutil.copyfile(FIXTURES / "malformed.fstab", path)
    original = path.read_bytes()
    with pytest.raises(UsageError) as exc:
        fstab.plan(path, [fstab.Persist("/srv/www", dict(NEW))], entries=[HAND])
    msg = str(exc.value)
    assert "\n" not in msg and "line 16 has 2 field(s)" in msg and "nothing was changed" in msg
    assert path.read_bytes() == original
    assert "malformed" in fstab.verify(Env(), original.decode(), ["/srv/www"])


def test_line_found_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "srv" / "www"
    real.mkdir(parents=True)
    (tmp_path / "www").symlink_to(real)
    text = f"gluster1:/www {tmp_path}/www glusterfs defaults 0 0\n"
    out = fstab_edit.set_options(text, fstab.matcher(text, str(real)), {"entry-timeout": "600"})
    assert out == text.replace("defaults", "defaults,entry-timeout=600")
    # a line naming the mount point as it is wins over one that only resolves to it
    both = text + f"gluster1:/www2 {real}/ glusterfs defaults 0 0\n"
    out = fstab_edit.set_options(both, fstab.matcher(both, str(real)), {"entry-timeout": "600"})
    assert out == text + f"gluster1:/www2 {real}/ glusterfs defaults,entry-timeout=600 0 0\n"


def test_findmnt_judges_the_lines_apply_writes(tmp_path: Path) -> None:
    """The real `findmnt --verify --tab-file` on the changed mount's lines: an added line
    passes; a line for a mount point that does not exist is rejected; other lines (Debian's
    UUIDs of another machine) are not apply's business."""
    code = tmp_path / "code"
    code.mkdir()
    entry = MountEntry("127.0.0.1:/vol", str(code), "fuse.glusterfs", "rw")
    text = (FIXTURES / "debian.fstab").read_text()
    out = fstab_edit.add_line(text, entry.source, entry.mount_point, entry.fstype, NEW)
    assert fstab.verify(Env(), out, [str(code)]) == ""
    gone = out.replace(str(code), f"{tmp_path}/gone")
    problem = fstab.verify(Env(), gone, [f"{tmp_path}/gone"])
    assert problem.startswith("findmnt --verify rejects") and "\n" not in problem


def test_apply_refuses_a_rejected_fstab_and_writes_nothing(tmp_path: Path) -> None:
    """apply --yes checks the new fstab before its backup set and its first write: refused in
    one line, the file, the mount and the state root untouched."""
    path = tmp_path / "fstab"
    shutil.copyfile(FIXTURES / "glusterfs.fstab", path)
    original = path.read_bytes()
    edit = fstab.plan(path, [fstab.Persist("/srv/www", dict(NEW))], entries=[])
    assert edit is not None
    target = Target("www", "php-fpm", [], tmp_path / "www.conf", 0, "", None, fstab=path)
    step = StorageStep(MOUNT, "/srv/www", {}, dict(NEW))
    result = apply_cmd.ApplyResult(ApplyMode.DRY_RUN, target, edits=[edit], steps=[step])
    home = tmp_path / "home"
    with pytest.raises(UsageError) as exc:
        apply_cmd.execute(Env(state_root=home), result, apply_cmd.ApplyOptions(all=True, yes=True))
    assert "findmnt --verify rejects" in str(exc.value) and "nothing was changed" in str(exc.value)
    assert "\n" not in str(exc.value) and not step.done
    assert path.read_bytes() == original and not home.exists()


def test_no_fstab_with_rollback_is_bad_usage() -> None:
    with pytest.raises(UsageError, match="--rollback"):
        apply_cmd.validate(Env(), apply_cmd.ApplyOptions(rollback=True, fstab=False))

