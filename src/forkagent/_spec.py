"""Model strings, ``provider:model[@base-url]``: parsed here, below models and prices, which both need it."""

from __future__ import annotations

import re

_SERVER = re.compile(r"@(?=https?://)")


def split_base_url(name: str) -> tuple[str, str | None]:
    """``model@http://host/v1`` -> (model, base URL); a name without ``@http(s)://`` is all model.

    The first ``@http`` splits, so a model id may hold ``@`` (``claude-3@20240229``).
    """
    found = _SERVER.search(name)
    if found is None or found.start() == 0:
        return name, None
    return name[: found.start()], name[found.end() :]
