"""The coordinator's signing key: the configured file, or one it makes in its state folder.

Every model announcement and assignment the coordinator publishes is signed with it
(:mod:`faultfleet.wire.signing`); agents trust its public key.
"""

from __future__ import annotations

import logging
from pathlib import Path

from faultfleet.wire.signing import SigningKey

logger = logging.getLogger(__name__)


def signing_key(key_file: Path | None, state_dir: Path) -> SigningKey:
    """The key of ``signing.key_file``; without one, ``state_dir/signing.key``, made if absent.

    Raises
    ------
    faultfleet.wire.signing.KeyFileError
        The configured file is missing or unusable.
    """
    if key_file is not None:
        return SigningKey.load(key_file)
    path = state_dir / "signing.key"
    if path.exists():
        return SigningKey.load(path)
    key = SigningKey.generate()
    key.save(path)
    logger.warning(
        "created the signing key %s (key id %s); every agent must trust its public key: "
        'add "%s" to [signing] trusted_keys (`faultfleet keys show --key %s` prints it again)',
        path,
        key.key_id,
        key.public_text,
        path,
    )
    return key
