"""``--executor`` and ``--ray-address``: where ``run`` and ``demo`` run the children's work."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from .errors import fail

if TYPE_CHECKING:
    from ..executors.ray import RayExecutor

T = TypeVar("T")

ExecutorOption = Annotated[
    str,
    typer.Option(
        "--executor",
        help="Where children's model requests and tool calls run: in-process, or ray "
        "(a Ray cluster; the ray extra).",
    ),
]
RayAddressOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        help="The Ray cluster to join (auto, ray://HOST:10001); default: start a local one.",
    ),
]


def executor_for(name: str, address: str | None, *, as_json: bool) -> RayExecutor | None:
    """The executor the options ask for; None is the in-process one."""
    if name not in ("in-process", "ray"):
        fail(f"--executor {name!r}: give in-process or ray", as_json=as_json, exit_code=2)
    if name == "in-process":
        if address is not None:
            fail("--ray-address needs --executor ray", as_json=as_json, exit_code=2)
        return None
    from ..errors import ConfigurationError

    try:
        from ..executors.ray import RayExecutor
    except ConfigurationError as exc:
        fail(str(exc), as_json=as_json, kind=type(exc).__name__)
    return RayExecutor(address)


async def closing(executor: RayExecutor | None, work: Callable[[], Awaitable[T]]) -> T:
    """``work``, then the executor's workers and servers stopped, in the same event loop."""
    if executor is None:
        return await work()
    async with executor:
        return await work()
