"""The tree an app runs from, as its traced requests show it (model/app_tree.py): what a
shadow copies, and what it uses in place."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AppTree:
    """`root`: the directory copied (the docroot, or a directory above it holding the code
    the requests include); `in_place`: the directories of included code outside it, used
    where they are (a system library, a tree too wide to copy)."""

    docroot: str
    root: str
    in_place: tuple[str, ...] = ()
    why: str = ""  # how it was found, when not as usual (not traced: the docroot)

    @property
    def above(self) -> bool:
        return self.root != self.docroot

    def note(self) -> str:
        """One line for the run's notes ('' when the tree is the docroot and nothing is used
        in place)."""
        parts = [self.why] if self.why else []
        if self.above:
            parts.append(f"the app's code reaches above its docroot: {self.root} is copied, "
                         f"the docroot {self.docroot} within it")
        if self.in_place:
            parts.append(f"code used in place, not copied: {', '.join(self.in_place)}")
        return "; ".join(parts)
