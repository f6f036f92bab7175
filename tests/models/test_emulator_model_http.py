"""``EmulatorModel(id, url=...)``: the same adapters against an emulator served over HTTP."""

from __future__ import annotations

import pytest

from forkagent.emulator import Emulator, Fault, serve
from forkagent.errors import ConfigurationError, ProviderError
from forkagent.messages import user
from forkagent.models._retry import RetryPolicy
from forkagent.models.emulator import EmulatorModel
from forkagent.requests import ModelRequest

from ._helpers import FAST, check_conversation, converse, script_tool_turn

pytest.importorskip("uvicorn")


@pytest.mark.parametrize("model_id", ["claude-sonnet-4-6", "gpt-4.1", "gemini-2.5-flash"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_conversation_over_http(model_id: str, stream: bool) -> None:
    local, served = Emulator(), Emulator()
    for emulator in (local, served):
        script_tool_turn(emulator)
    await converse(EmulatorModel(model_id, local, retry=FAST), stream=stream)
    with serve(served) as server:
        model = EmulatorModel(model_id, url=server.url, retry=FAST)
        try:
            check_conversation(await converse(model, stream=stream))
        finally:
            await model.aclose()
    # The same requests, with the same cache outcomes, as in process.
    assert [e.usage for e in served.log] == [e.usage for e in local.log]


async def test_an_error_status_over_http_is_the_adapters_own() -> None:
    emulator = Emulator()
    request = ModelRequest(model="gpt-4.1", messages=(user("hello"),))
    with serve(emulator) as server:
        model = EmulatorModel("gpt-4.1", url=server.url, retry=RetryPolicy(max_retries=0))
        emulator.faults.inject(Fault("server_error"))
        with pytest.raises(ProviderError) as caught:
            await model.request(request)
        await model.aclose()
    assert caught.value.status == 500


def test_an_emulator_or_its_url_not_both() -> None:
    with pytest.raises(ConfigurationError, match="either an emulator or its url"):
        EmulatorModel("gpt-4.1", Emulator(), url="http://127.0.0.1:1")
