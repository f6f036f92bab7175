"""``forkagent models``: the models forkagent knows, with prices, cache minimums and deprecation."""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..errors import UnknownModelError
from ..messages import JsonValue
from ..pricing import PRICES, PRICES_AS_OF, Price


@dataclass(frozen=True, slots=True)
class KnownModel:
    provider: str
    model: str
    price: Price
    min_cache_tokens: int | None
    """The shortest prompt prefix the provider caches; None when unknown."""
    deprecated: str | None
    """The end-of-life date the installed provider SDK gives, if it marks the model deprecated."""

    def to_dict(self) -> dict[str, JsonValue]:
        price = self.price
        return {
            "model": f"{self.provider}:{self.model}",
            "input": price.input,
            "output": price.output,
            "cache_read": price.cache_read,
            "cache_write_5m": price.cache_write_5m,
            "cache_write_1h": price.cache_write_1h,
            "min_cache_tokens": self.min_cache_tokens,
            "deprecated": self.deprecated,
        }


def known_models() -> list[KnownModel]:
    """Every priced model, by provider; the cache minimum is the emulator's profile of it."""
    from ..models.emulator import emulator_model, family

    retired = _deprecations()
    out: list[KnownModel] = []
    for name, price in PRICES.items():
        try:
            provider = family(name)
        except UnknownModelError:
            continue
        minimum = emulator_model(name).profile.min_cache_tokens or None
        out.append(KnownModel(provider, name, price, minimum, retired.get(name)))
    return sorted(out, key=lambda m: (m.provider, m.model))


def _deprecations() -> dict[str, str]:
    """The anthropic SDK's deprecation table, when the SDK is installed."""
    try:
        module = importlib.import_module("anthropic.resources.messages.messages")
    except ImportError:
        return {}
    table: dict[object, object] = getattr(module, "DEPRECATED_MODELS", {})
    return {str(model): str(date) for model, date in table.items()}


def models_command(
    provider: Annotated[
        str | None, typer.Argument(metavar="PROVIDER", help="Only this provider's models.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """List known models per provider: USD per million tokens, cache minimum, deprecation."""
    models = [m for m in known_models() if provider in (None, m.provider)]
    if as_json:
        typer.echo(
            json.dumps(
                {"prices_as_of": PRICES_AS_OF, "models": [m.to_dict() for m in models]}, indent=2
            )
        )
        return
    table = Table(title=f"known models: USD per million tokens, as of {PRICES_AS_OF}")
    table.add_column("model", no_wrap=True)
    for column in ("in", "out", "read", "write", "min cache"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("end of life")
    for m in models:
        table.add_row(
            f"{m.provider}:{m.model}",
            f"{m.price.input:g}",
            f"{m.price.output:g}",
            f"{m.price.cache_read:g}",
            f"{m.price.cache_write_5m:g}",
            "-" if m.min_cache_tokens is None else f"{m.min_cache_tokens:,}",
            m.deprecated or "",
        )
    Console().print(table)
