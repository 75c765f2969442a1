"""The what-if engine's count of the syscalls it makes (`model.php_engine`): per request
and per (mount, call type, failed). Pure code."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Tally:
    """Calls per request ({req: [n, failed] × call}) and per (mount, call, failed)."""

    per_req: dict[int, list[int]] = field(default_factory=dict)
    # (mount index + 1) << 4 | call index << 1 | failed → calls (an int key: counting a
    # million calls is much quicker than with a tuple key)
    codes: dict[int, int] = field(default_factory=dict)

    @property
    def by_mount(self) -> dict[tuple[int, int, bool], int]:
        """{(mount index, call index, failed): calls}, in the order first counted."""
        return {((k >> 4) - 1, (k >> 1) & 7, bool(k & 1)): n for k, n in self.codes.items()}
