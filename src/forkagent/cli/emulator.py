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
    lenient: Annotated[
        bool,
        typer.Option(
            help="Accept malformed requests and unknown model ids (no validation), "
            "as the emulator did before it validated."
        ),
    ] = False,
    call_tools: Annotated[
        bool,
        typer.Option(
            help="Under tool_choice auto, call the first offered tool when the user has just "
            "spoken (as the SDKs' tool examples expect); default: answer in text."
        ),
    ] = False,
) -> None:
    """Serve the Anthropic, OpenAI-compatible and Gemini routes until Ctrl-C."""
    from ..emulator import Emulator, Latency, default_policy, tool_choosing_policy
    from ..errors import ConfigurationError
    from .errors import fail

    try:
        import uvicorn

        from ..emulator.asgi import build_app
    except ImportError as missing:
        fail(
            str(
                ConfigurationError(
                    f"emulator serve needs {missing.name}: pip install 'forkagent[server]'"
                )
            )
        )

    emulator = Emulator(
        latency=Latency(ttft, tokens_per_second),
        policy=tool_choosing_policy if call_tools else default_policy,
        require_key=require_key,
        lenient=lenient,
    )
    typer.echo(how_to_point(f"http://{host}:{port}"))
    # access_log: one line per request (method, path, status) as it is answered
    uvicorn.run(
        build_app(emulator), host=host, port=port, log_level="info", lifespan="off", ws="none"
    )


def how_to_point(url: str) -> str:
    """What to give forkagent and each SDK so that they talk to the emulator at ``url``."""
    return "\n".join(
        [
            f"forkagent emulator on {url}: each provider's wire format and cache rules, "
            "scripted replies; any API key works",
            f"  forkagent      --model anthropic:claude-sonnet-4-6@{url}  (or openai:gpt-5.2@{url}/v1)",
            f'  anthropic      Anthropic(base_url="{url}", api_key="emulator")',
            f'  openai         OpenAI(base_url="{url}/v1", api_key="emulator")',
            f'  google-genai   Client(api_key="emulator", http_options={{"base_url": "{url}"}})',
            f"  environment    ANTHROPIC_BASE_URL={url} OPENAI_BASE_URL={url}/v1",
            "  frameworks     that environment and OPENAI_API_KEY=emulator "
            "(OpenAI Agents SDK: also OPENAI_AGENTS_DISABLE_TRACING=1)",
        ]
    )
