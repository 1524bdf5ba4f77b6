"""Where the coordinator placed machines that joined, on disk: ``state_dir/placements.json``.

Written atomically (:func:`faultfleet.files.atomic_write`) whenever a placement changes,
so a restarted coordinator knows which agents it has placed (and need not ask them again),
which of them may join the federation with which cluster, which are unverified, and each
member's labelled-window count when it was last looked at (a change places it again).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from faultfleet.errors import UsageError
from faultfleet.files import atomic_write
from faultfleet.wire.campaign_messages import PlacementNote

SCHEMA_VERSION: Literal[1] = 1


class PlacementStoreError(UsageError, RuntimeError):
    """``placements.json`` is unreadable or not what it should be."""


class PlacementBook(BaseModel):
    """The file's content.

    Attributes
    ----------
    placements : dict of str to PlacementNote
        The latest placement of every agent placed so far, by agent id.
    windows : dict of str to int
        Labelled windows each agent held at its last offer (a member: or when first seen).
    offered : dict of str to str
        The campaign id during which each agent was last offered the models ("" before
        the first campaign): a machine is offered them at most once per campaign.
    moves : dict of str to str
        Members whose new data placed them on another cluster → that cluster's id, until
        the move is made in the strategy before the next round.
    offers : int
        Offers made so far: numbers the candidates of the next offer, so that a repeated
        offer is a new task to the agent, never answered from its cache of old answers.
    """

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    placements: dict[str, PlacementNote] = {}
    windows: dict[str, int] = {}
    offered: dict[str, str] = {}
    moves: dict[str, str] = {}
    offers: int = 0


class PlacementStore:
    """Reads and writes ``placements.json`` in ``state_dir``."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "placements.json"

    def load(self) -> PlacementBook:
        """The saved book; an empty one when there is no file yet.

        Raises
        ------
        PlacementStoreError
            The file cannot be read or does not hold a placement book.
        """
        if not self.path.exists():
            return PlacementBook()
        try:
            return PlacementBook.model_validate_json(self.path.read_bytes())
        except (OSError, ValidationError) as error:
            raise PlacementStoreError(
                f"{self.path} is corrupt or not a faultfleet placement file ({error}); move "
                "it away to place every machine again"
            ) from error

    def save(self, book: PlacementBook) -> None:
        """Write ``book`` in place of the file (atomically)."""
        data = book.model_dump_json(indent=1).encode("utf-8")
        atomic_write(self.path, lambda handle: handle.write(data))
