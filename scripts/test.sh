#!/usr/bin/env bash
# The test command: installs what the tests need on a fresh Debian machine, then runs every test.
#   - kcat, zookeeper (a real ZooKeeper server for the zookeeper metadata store tests) and python3-venv
#     from the OS packages, only if missing; uses sudo when not root
#   - a virtual environment in .venv (only if it is missing)
#   - logbus in editable mode with its test extras: pytest, pytest-timeout, kafka-python, lz4, zstandard, python-snappy,
#     and the pipeline extra (pyspark, pyarrow, pandas, deltalake)
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -x` or `bash scripts/test.sh tests/unit -q`.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"

missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)  # PySpark (the pipeline) runs on a JVM
dpkg -s zookeeper >/dev/null 2>&1 || missing+=(zookeeper)
if [ ! -x .venv/bin/python ] && ! "$PYTHON" -c "import ensurepip, venv" >/dev/null 2>&1; then
    missing+=(python3-venv)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    echo "installing ${missing[*]}" >&2
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "${missing[@]}"
fi

if [ ! -x .venv/bin/python ]; then
    echo "creating .venv" >&2
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet -e '.[test]'

# Run everything under tests/, unless the arguments name test files or directories themselves.
targets=(tests)
for arg in "$@"; do
    if [ -e "${arg%%::*}" ]; then targets=(); break; fi
done

status=0
.venv/bin/python -m pytest -ra -p no:cacheprovider "${targets[@]}" "$@" || status=$?
if [ "$status" -eq 5 ]; then
    echo "no tests ran: pytest collected no tests, which is a failure" >&2
fi
exit "$status"
