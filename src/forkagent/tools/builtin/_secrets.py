"""Files that hold credentials: never read, searched or listed unless the user allows it.

Matched on the path's components, so ``.env`` anywhere in the tree and anything
under a ``.ssh`` directory count, wherever they are found.
"""

from __future__ import annotations

import fnmatch
from pathlib import PurePath

SECRET_NAMES = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".npmrc",
    ".pypirc",
    ".netrc",
    ".git-credentials",
    "credentials.json",
    "application_default_credentials.json",
)
"""File names (shell patterns) that are secrets wherever they are."""
SECRET_DIRS = (".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker")
"""Directories whose every file is a secret (keys, cloud and registry credentials)."""
NOT_SECRETS = (".env.example", ".env.sample", ".env.template", "*.pub")


def is_secret(path: PurePath) -> bool:
    """Whether ``path`` names a credentials file by the lists above."""
    name = path.name
    if any(fnmatch.fnmatch(name, pattern) for pattern in NOT_SECRETS):
        return False
    if any(part in SECRET_DIRS for part in path.parts[:-1]):
        return True
    return any(fnmatch.fnmatch(name, pattern) for pattern in SECRET_NAMES)
