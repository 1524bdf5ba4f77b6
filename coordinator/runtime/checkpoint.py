"""Checkpoints of the coordinator service, and the saved run a restarted service resumes.

After every round, and whenever agents joined or left between rounds, the service saves the
round engine's state (:mod:`coordinator.engine.state`, under ``state_dir/engine``) with a
``service`` section in its metadata: the run id, the federation, the settings a resumed
run must share (:func:`run_identity`), the run summary and the clusters whose models were
published. ``state_dir/summary.json`` is the same summary for people and scripts
(:func:`coordinator.runtime.run_summary.load_summary`).

A restarted service loads that section (:meth:`ServiceCheckpoint.load`) and refuses, with
a :class:`ServiceError` that says what to do, a checkpoint of another program or of a run
with other settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.adapters.publisher import ModelPublisher
from coordinator.engine.rounds import RoundEngine
from coordinator.engine.state import EngineState, has_state, load_state, save_state
from coordinator.runtime.run_summary import RunSummary, summary_text
from coordinator.runtime.settings import RunSettings
from faultfleet.errors import UsageError
from faultfleet.files import atomic_write


class ServiceError(UsageError, RuntimeError):
    """The service cannot start or continue (bad state directory, incompatible state)."""


def run_identity(run: RunSettings) -> dict[str, Any]:
    """Settings a resumed run must share with the saved one."""
    return {
        "strategy": run.strategy,
        "model": run.model,
        "seed": run.seed,
        "sample_shape": list(run.sample_shape),
        "class_names": list(run.class_names),
    }


@dataclass(frozen=True)
class SavedRun:
    """A run found in the state directory, checked against the settings."""

    state: EngineState
    """The engine's state, its ``service`` section included."""
    service: dict[str, Any]
    """The ``service`` section: run id, clients, identity, summary, published clusters."""
    run_id: str
    clients: list[str]
    """The federation when the checkpoint was saved."""


@dataclass(frozen=True)
class ServiceCheckpoint:
    """Saving and loading the service's checkpoints in ``state_dir``.

    Parameters
    ----------
    state_dir : Path
        The service's state directory; the engine's checkpoints go to ``engine/`` in it.
    run : RunSettings
        The run's settings; a saved run must share their :func:`run_identity`.
    """

    state_dir: Path
    run: RunSettings

    @property
    def engine_dir(self) -> Path:
        """Where the engine's checkpoints are saved."""
        return self.state_dir / "engine"

    def load(self) -> SavedRun | None:
        """The saved run to resume; None when the state directory holds none.

        Raises
        ------
        ServiceError
            If the checkpoint has no service section or was saved with other settings.
        """
        if not has_state(self.engine_dir):
            return None
        state = load_state(self.engine_dir)
        service = state.meta.get("service")
        if not isinstance(service, dict):
            raise ServiceError(
                f"{self.engine_dir} holds a checkpoint of another program (no service "
                "section); point state_dir at an empty folder"
            )
        self._check_compatible(service)
        return SavedRun(state, service, str(service["run_id"]), list(service["clients"]))

    def _check_compatible(self, service: dict[str, Any]) -> None:
        saved = service.get("run", {})
        now = run_identity(self.run)
        different = sorted(k for k, v in now.items() if saved.get(k) != v)
        if different:
            raise ServiceError(
                f"{self.state_dir} holds a run with other {', '.join(different)} "
                f"({', '.join(f'{k}={saved.get(k)!r}' for k in different)}); restore those "
                "settings to resume it, or point state_dir at an empty folder to start anew"
            )

    def save(self, engine: RoundEngine, summary: RunSummary, publisher: ModelPublisher) -> None:
        """Save the engine's state with the service section, then ``summary.json``."""
        state = engine.state()
        state.meta["service"] = {
            "run_id": summary.run_id,
            "clients": summary.agents,
            "run": run_identity(self.run),
            "summary": summary.to_json(),
            "published": sorted(publisher.published_clusters),
        }
        save_state(self.engine_dir, state)
        self.write_summary(summary)

    def write_summary(self, summary: RunSummary | None) -> None:
        """Replace ``state_dir/summary.json`` atomically; nothing without a summary."""
        if summary is None:
            return
        text = summary_text(summary)
        atomic_write(self.state_dir / "summary.json", lambda f: f.write(text))
