# Sourced by scripts/demo and scripts/test: makes .venv hold exactly what uv.lock says.
# Needs only python3 and pip: the locker itself (uv, pinned) is installed from PyPI into
# .venv-tools the first time. UV_PYTHON_DOWNLOADS=never: use this machine's python3.
UV_VERSION=0.13.9
TOOLS=.venv-tools
export UV_PYTHON_DOWNLOADS=never UV_PROJECT_ENVIRONMENT=.venv UV_NO_PROGRESS=1
# Installed packages come with their bytecode: otherwise every process the tests start (pytest
# workers, `python -m forkagent`, Ray workers) compiles the SDKs from source again, seconds
# each, wherever PYTHONDONTWRITEBYTECODE is set (as in many containers).
export UV_COMPILE_BYTECODE=1

uv_tool() {
    if ! "$TOOLS/bin/uv" --version 2>/dev/null | grep -qF "uv $UV_VERSION"; then
        python3 -m venv "$TOOLS"
        "$TOOLS/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
    fi
    "$TOOLS/bin/uv" "$@"
}

# locked_env ARGS...: .venv with the locked packages (plus the project, editable); ARGS are
# uv sync's (which extras and groups).
locked_env() {
    uv_tool sync --frozen --quiet --python python3 "$@"
}
