"""``forkagent emulator serve``: the provider emulator on a local port."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(help="The local emulator of the providers' APIs and prompt caches.")


@app.command("serve")
def serve_command(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0 picks a free one).")] = 8765,
    ttft: Annotated[
        float, typer.Option(help="Simulated seconds to the first token of each response.")
    ] = 0.02,
    tokens_per_second: Annotated[float, typer.Option(help="Simulated output speed.")] = 2000.0,
    require_key: Annotated[
        bool, typer.Option(help="Answer 401 when a request carries no API key.")
    ] = False,
) -> None:
    """Serve the Anthropic, OpenAI-compatible and Gemini routes until Ctrl-C."""
    import uvicorn

    from ..emulator import Emulator, Latency

    emulator = Emulator(latency=Latency(ttft, tokens_per_second), require_key=require_key)
    typer.echo(
        f"emulator on http://{host}:{port}  (Anthropic/Gemini base_url: that URL; "
        f"OpenAI base_url: http://{host}:{port}/v1)"
    )
    uvicorn.run(emulator.app, host=host, port=port, log_level="warning", lifespan="off")
