"""The coordinator's signing key: made once in state_dir, or the configured file, never guessed."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from coordinator.runtime.signing_key import signing_key
from faultfleet.wire.signing import KeyFileError, SigningKey


def test_without_a_key_file_one_is_made_in_state_dir_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Execute
    with caplog.at_level(logging.WARNING):
        first = signing_key(None, tmp_path)
    again = signing_key(None, tmp_path)

    # Assert
    path = tmp_path / "signing.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert again.key_id == first.key_id
    assert first.public_text in caplog.text
    assert "trusted_keys" in caplog.text


def test_a_configured_key_file_is_used(tmp_path: Path) -> None:
    key = SigningKey.generate()
    key.save(tmp_path / "keys" / "coordinator.key")

    used = signing_key(tmp_path / "keys" / "coordinator.key", tmp_path / "state")

    assert used.key_id == key.key_id
    assert not (tmp_path / "state" / "signing.key").exists()


def test_a_configured_key_file_that_is_missing_is_an_error_not_a_new_key(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="faultfleet keys generate"):
        signing_key(tmp_path / "absent.key", tmp_path / "state")

    assert not (tmp_path / "absent.key").exists()
