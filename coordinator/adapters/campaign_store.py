"""The coordinator's campaigns on disk, in ``state_dir/campaigns``.

Layout (every file written atomically, :func:`faultfleet.files.atomic_write`)::

    campaigns/
      state.json          the campaigns so far (the running one last), the next number and
                          each agent's labelled-window count when the last campaign started
      requests/start.json a ``faultfleet campaign start`` not applied yet
      requests/stop.json  a ``faultfleet campaign stop`` not applied yet

The service writes ``state.json`` when a campaign starts, after each of its rounds and when
it ends; a restarted coordinator reads it and continues a running campaign. The ``campaign``
commands of ``faultfleet`` read it and leave requests beside it, without the broker, as
``faultfleet models`` does with the model registry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coordinator.engine.campaigns import Campaign, CampaignStatus, CampaignTrigger
from faultfleet.errors import UsageError
from faultfleet.files import atomic_write

SCHEMA_VERSION: Literal[1] = 1
KEEP_CAMPAIGNS = 100
"""Campaigns kept in ``state.json`` (the oldest are dropped; model records keep their id)."""


class CampaignStoreError(UsageError, RuntimeError):
    """A campaign file is unreadable or not what it should be."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


StrictT = TypeVar("StrictT", bound=_Strict)


class CampaignRecord(_Strict):
    """One campaign as ``state.json`` keeps it."""

    number: Annotated[int, Field(ge=1)]
    trigger: CampaignTrigger
    status: CampaignStatus
    start_round: Annotated[int, Field(ge=0)]
    end_round: Annotated[int, Field(ge=0)]
    started_at: float
    ended_at: float | None = None
    recluster: bool = False

    @classmethod
    def of(cls, campaign: Campaign) -> CampaignRecord:
        return cls(
            number=campaign.number,
            trigger=campaign.trigger,
            status=campaign.status,
            start_round=campaign.start_round,
            end_round=campaign.end_round,
            started_at=campaign.started_at,
            ended_at=campaign.ended_at,
            recluster=campaign.recluster,
        )

    def campaign(self) -> Campaign:
        return Campaign(**self.model_dump())


class CampaignState(_Strict):
    """``state.json``."""

    schema_version: Literal[1] = SCHEMA_VERSION
    campaigns: tuple[CampaignRecord, ...] = ()
    """Oldest first; at most :data:`KEEP_CAMPAIGNS`."""
    baseline: dict[str, int] = Field(default_factory=dict)
    """Agent → labelled windows it reported when the last campaign started, or when it was
    first heard of after that."""
    new_labelled_windows: int = 0
    """The agents' newly labelled windows when the file was written (for people)."""

    @property
    def last(self) -> Campaign | None:
        return self.campaigns[-1].campaign() if self.campaigns else None

    @property
    def next_number(self) -> int:
        return self.campaigns[-1].number + 1 if self.campaigns else 1


class CampaignRequest(_Strict):
    """An operator's ``faultfleet campaign start`` or ``stop``."""

    schema_version: Literal[1] = SCHEMA_VERSION
    action: Literal["start", "stop"]
    rounds: Annotated[int, Field(ge=1)] | None = None
    """``start``: rounds of the campaign (default ``[campaigns] rounds``)."""
    recluster: bool = False
    """``start``: begin the strategy afresh instead of warm-starting it."""
    requested_at: float


class CampaignStore:
    """Reads and writes ``root`` (``state_dir/campaigns``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def state_path(self) -> Path:
        return self.root / "state.json"

    def load(self) -> CampaignState | None:
        """The saved state; None when no campaign was ever saved."""
        if not self.state_path.exists():
            return None
        return _load(self.state_path, CampaignState)

    def save(self, state: CampaignState) -> None:
        kept = state.campaigns[-KEEP_CAMPAIGNS:]
        _write(self.state_path, state.model_copy(update={"campaigns": kept}))

    def request(self, request: CampaignRequest) -> Path:
        """Leave ``request`` for the coordinator (replacing one of the same action)."""
        path = self._request_path(request.action)
        _write(path, request)
        return path

    def pending(self) -> dict[str, CampaignRequest]:
        """Requests not applied yet, by action."""
        found: dict[str, CampaignRequest] = {}
        for action in ("start", "stop"):
            path = self._request_path(action)
            if path.exists():
                found[action] = _load(path, CampaignRequest)
        return found

    def done(self, action: str) -> None:
        self._request_path(action).unlink(missing_ok=True)

    def _request_path(self, action: str) -> Path:
        return self.root / "requests" / f"{action}.json"


def _load(path: Path, model: type[StrictT]) -> StrictT:
    try:
        return model.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError) as error:
        first = " ".join(str(error).splitlines()[:3])
        raise CampaignStoreError(
            f"{path} is unreadable or not a faultfleet campaign file ({first}); restore it "
            "from a backup or remove it (a removed request is simply not applied)"
        ) from error


def _write(path: Path, model: BaseModel) -> None:
    text = model.model_dump_json(indent=2).encode()
    atomic_write(path, lambda f: f.write(text))
