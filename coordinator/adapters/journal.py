"""The round in flight, on disk: accepted updates survive a coordinator restart.

The engine's checkpoint (``coordinator.engine.state``) is written after every completed round. An
update accepted in the middle of a round would be lost by a crash before that checkpoint,
so the MQTT fleet writes every accepted update here before counting it — in batches, one
atomically written segment file and one fsync per batch — along with the list of agents
that were available when the round began.

After a restart the engine resumes from its last checkpoint and replays the interrupted
round with the same available agents, so it samples the same agents and sends the same
tasks (same task ids: they hash the round, agent, weights and seed). Tasks whose update is
in the journal are not sent again; the round only waits for the rest.

A completed round's segments are not deleted but kept as spares (up to ``spare_bytes``, in
a folder beside the journal's, ``<journal>.spare``), and the next round's batches are
written into them (:func:`~faultfleet.files.atomic_write_buffers` with ``reuse``):
overwriting a file's blocks, or on tmpfs its pages, costs the kernel about half of what
allocating them for a new file does, and on a disk the fsync waits about half as long. A
spare becomes a segment only by its rename once written and fsynced, as a new temporary
file does, so a crash leaves the same journal either way.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
from collections.abc import Sequence
from pathlib import Path

from faultfleet.files import atomic_write, atomic_write_buffers
from faultfleet.wire.topics import check_name

logger = logging.getLogger(__name__)

_PLAN = "round.json"
_SUFFIX = ".segment"
_RECORD = struct.Struct(">HQ")
"""Record header: task-id length, payload length; then the task id and the payload."""
_SPARE = ".spare"
SPARE_BYTES = 256 * 1024 * 1024
"""Segments of a completed round kept to be written over by the next (bytes at most)."""


class RoundJournal:
    """Accepted answers of the round in flight, under ``directory``.

    Parameters
    ----------
    directory : Path
        Created on first use; cleared when a round completes.
    spare_bytes : int
        The most bytes of a completed round's segments kept beside it to be written over
        (0: none; see the module docstring).
    """

    def __init__(self, directory: Path, *, spare_bytes: int = SPARE_BYTES) -> None:
        self.directory = directory
        self.spare_bytes = spare_bytes
        self.spare_directory = directory.with_name(directory.name + ".spare")
        self._sequence = 0
        self._spares: list[Path] | None = None

    def begin(self, server_round: int, available: Sequence[str]) -> None:
        """Start ``server_round``; keeps accepted updates only if they belong to that round."""
        if self.current_round() != server_round:
            self.clear()
        plan = {"server_round": server_round, "available": list(available)}
        atomic_write(self.directory / _PLAN, lambda f: f.write(json.dumps(plan).encode()))

    def current_round(self) -> int | None:
        """The round the journal holds, or None."""
        plan = self._plan()
        return plan[0] if plan is not None else None

    def replay_available(self, server_round: int) -> list[str] | None:
        """The agents that were available when ``server_round`` began, if it was interrupted."""
        plan = self._plan()
        if plan is None or plan[0] != server_round:
            return None
        return plan[1]

    def record(self, agent_id: str, task_id: str, payload: bytes) -> None:
        """Keep the accepted ``payload`` answering ``task_id`` of ``agent_id``."""
        self.record_many([(agent_id, task_id, payload)])

    def record_many(self, entries: Sequence[tuple[str, str, bytes]]) -> None:
        """Keep several accepted (agent id, task id, payload) entries with one disk flush.

        They go to one new segment file, written atomically (temporary file, fsync,
        rename): after a crash either the whole batch is there or none of it, and the
        batch costs one fsync instead of one per update (group commit). Each payload is
        written as it was received, from its own buffer (one ``writev`` for the batch,
        :func:`~faultfleet.files.atomic_write_buffers`): a journaled update is neither
        copied nor encoded again.
        """
        if not entries:
            return
        for agent_id, task_id, _ in entries:
            check_name("agent id", agent_id)
            check_name("task id", task_id)
        fresh = self._sequence == 0
        if fresh:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._sequence = self._last_sequence()
        self._sequence += 1
        buffers: list[bytes | bytearray | memoryview] = []
        for _, task_id, payload in entries:
            name = task_id.encode("ascii")
            buffers.append(_RECORD.pack(len(name), len(payload)) + name)
            buffers.append(payload)
        path = self.directory / f"{self._sequence:010d}{_SUFFIX}"
        spare = self._take_spare()
        try:
            atomic_write_buffers(path, buffers, make_parent=fresh, reuse=spare)
        except FileNotFoundError:  # the folder went away since the last batch
            atomic_write_buffers(path, buffers)
        except OSError as error:
            if spare is None:
                raise
            # e.g. the journal's folder is a mount of its own: spares cannot be renamed in
            logger.warning(
                "round journal %s cannot write over its spare %s (%s); it writes new files "
                "from now on",
                self.directory,
                spare,
                error,
            )
            self.spare_bytes, self._spares = 0, []
            atomic_write_buffers(path, buffers)

    def _take_spare(self) -> Path | None:
        """A spare segment to write over, or None."""
        spares = self._spares  # clear() may drop the list meanwhile; this one is still good
        if spares is None:
            found = self.spare_directory.glob(f"*{_SPARE}") if self.spare_directory.is_dir() else ()
            spares = self._spares = sorted(found)
        return spares.pop() if spares else None

    def accepted(self) -> dict[str, bytes]:
        """Accepted payloads of the round in flight by task id (a later record wins)."""
        found: dict[str, bytes] = {}
        if not self.directory.is_dir():
            return found
        for path in sorted(self.directory.glob(f"*{_SUFFIX}")):
            data = path.read_bytes()
            offset = 0
            while offset + _RECORD.size <= len(data):
                name_length, payload_length = _RECORD.unpack_from(data, offset)
                start = offset + _RECORD.size
                end = start + name_length + payload_length
                if end > len(data):
                    break
                task_id = data[start : start + name_length].decode("ascii", errors="replace")
                found[task_id] = data[start + name_length : end]
                offset = end
            if offset != len(data):
                logger.warning("round journal %s ends in a partial record; ignoring it", path)
        return found

    def _last_sequence(self) -> int:
        numbers = [
            int(path.name[: -len(_SUFFIX)])
            for path in self.directory.glob(f"*{_SUFFIX}")
            if path.name[: -len(_SUFFIX)].isdigit()
        ]
        return max(numbers, default=0)

    def clear(self) -> None:
        """Forget the round in flight (after its checkpoint is written); its segments become
        spares, up to ``spare_bytes`` of them with those kept already."""
        self._keep_spares()
        shutil.rmtree(self.directory, ignore_errors=True)
        self._sequence = 0

    def _keep_spares(self) -> None:
        if not self.directory.is_dir() or self.spare_bytes <= 0:
            return
        spares = self.spare_directory
        try:
            held = sorted(spares.glob(f"*{_SPARE}")) if spares.is_dir() else []
            kept = sum(p.stat().st_size for p in held)
            number = max((int(p.stem) for p in held if p.stem.isdigit()), default=0)
            for segment in sorted(self.directory.glob(f"*{_SUFFIX}")):
                size = segment.stat().st_size
                if kept + size > self.spare_bytes:
                    break
                spares.mkdir(exist_ok=True)
                number += 1
                os.replace(segment, spares / f"{number:010d}{_SPARE}")
                kept += size
        except OSError as error:  # another file system, permissions: new files it is
            logger.debug("round journal %s keeps no spare segments: %s", self.directory, error)
        self._spares = None

    def _plan(self) -> tuple[int, list[str]] | None:
        path = self.directory / _PLAN
        if not path.is_file():
            return None
        try:
            plan = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            logger.warning("ignoring unreadable round journal %s: %s", path, error)
            return None
        if (
            not isinstance(plan, dict)
            or not isinstance(plan.get("server_round"), int)
            or not isinstance(plan.get("available"), list)
        ):
            logger.warning("ignoring round journal %s: unexpected content", path)
            return None
        return plan["server_round"], [str(agent) for agent in plan["available"]]
