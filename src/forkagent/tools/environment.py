"""What the shell tool's commands see of the environment, and what the model never sees.

The process forkagent runs in usually holds a provider API key, and a
repository's agent can be talked into ``printenv``. So commands run with the
provider keys and every variable whose name looks like a secret removed (the
model of Codex's ``shell_environment_policy``), unless the user keeps it by
name; and any removed value that still reaches a tool's output (a command
reading it from a file, say) is replaced with ``[redacted $NAME]`` before the
model, the transcript, the logs or a span see it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

PROVIDER_KEYS = frozenset(
    {
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "OPENAI_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "DASHSCOPE_API_KEY",
        "DEEPSEEK_API_KEY",
        "AZURE_OPENAI_API_KEY",
        "OPENROUTER_API_KEY",
    }
)
SECRET_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|PRIVATE|SESSION)(_|$)"
    r"|^(AWS|AZURE|GCP|GOOGLE_APPLICATION)_",
    re.IGNORECASE,
)
"""``*_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*PASSWORD*``, cloud credentials and the like."""
MIN_REDACTED = 8
"""Values shorter than this are not searched for in output: too many false hits."""


@dataclass(frozen=True, slots=True)
class EnvironmentPolicy:
    """Which variables the shell tool passes on. ``keep`` names pass even if they look secret."""

    keep: frozenset[str] = frozenset()
    remove: frozenset[str] = frozenset()
    """More names to remove, whatever they look like."""

    @classmethod
    def keeping(cls, *names: str) -> EnvironmentPolicy:
        return cls(keep=frozenset(names))

    def removes(self, name: str) -> bool:
        if name in self.keep:
            return False
        return name in self.remove or name in PROVIDER_KEYS or bool(SECRET_NAME.search(name))

    def environment(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment a command gets."""
        source = os.environ if environ is None else environ
        return {k: v for k, v in source.items() if not self.removes(k)}

    def redactor(self, environ: Mapping[str, str] | None = None) -> Redactor:
        """Replaces the removed variables' values wherever they appear."""
        source = os.environ if environ is None else environ
        return Redactor(
            (name, value)
            for name, value in source.items()
            if self.removes(name) and len(value) >= MIN_REDACTED
        )


class Redactor:
    def __init__(self, secrets: Iterable[tuple[str, str]]) -> None:
        # Longest first, so a value that contains another is replaced whole.
        self._secrets = sorted(secrets, key=lambda item: -len(item[1]))

    def __call__(self, text: str) -> str:
        for name, value in self._secrets:
            if value in text:
                text = text.replace(value, f"[redacted ${name}]")
        return text

    def __bool__(self) -> bool:
        return bool(self._secrets)


DEFAULT_POLICY = EnvironmentPolicy()
