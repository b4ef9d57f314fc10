# Sourced by scripts/run and scripts/test: create or refresh .venv at the repo root.
# Usage: ensure_venv EXTRAS   (for example ensure_venv "lab")
ensure_venv() {
    local python="${PYTHON:-python3}"
    if ! .venv/bin/python -c "import sys; assert sys.version_info >= (3, 11)" 2>/dev/null; then
        rm -rf .venv
        "$python" -m venv .venv
    fi
    .venv/bin/python -m pip install --quiet --upgrade pip
    # llama-cpp-python compiles from source here (several minutes the first time; pip caches it).
    .venv/bin/python -m pip install --quiet --editable ".[$1]"
}
