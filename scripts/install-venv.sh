#!/usr/bin/env bash
# Install hermesd (editable, with EXTRAS such as '[test,local]') into the virtual environment VENV,
# creating it when missing; idempotent. Used by demo.sh and .ci/run.
#
#   bash scripts/install-venv.sh VENV [EXTRAS]
#
# With HERMES_VENV_CACHE=DIR (.ci/run sets it), a VENV that does not exist yet is copied, as hard
# links (seconds), from DIR/KEY, a venv an earlier run made for the same EXTRAS, pyproject.toml and
# this script (KEY: their hash), then pointed at this checkout; a VENV made here from nothing is
# kept there for the next run. Removing DIR is always safe.
#
# The embedded model's llama-cpp-python is compiled from source by pip (about 10 minutes on 2
# cores), and pip caches the wheel it builds. llama.cpp builds for "this CPU" by default
# (-march=native), so a cached wheel reused on a CPU with fewer instruction-set extensions dies
# with SIGILL. Hence: builds made here are portable (CMAKE_ARGS=-DGGML_NATIVE=OFF, llama.cpp's
# x86-64 baseline with AVX2/FMA/F16C; a CMAKE_ARGS of your own wins), and an installed build that
# uses instructions this CPU lacks (python -m child.providers.llama_build) is replaced by a portable
# one, its cached wheel removed first. See docs/operations.md, "The embedded model".
set -euo pipefail
VENV=$1
EXTRAS=${2:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CMAKE_ARGS=${CMAKE_ARGS:--DGGML_NATIVE=OFF}
# pip, quiet (-q) and without the machine's notice about a missing extra index (PIPQ_MORE: more lines not shown)
pipq() { "$VENV/bin/python" -m pip "$@" -q 2>&1 | grep -vE "^WARNING: Location|^\$${PIPQ_MORE:+|$PIPQ_MORE}" || true; }
kept=""
if [ -n "${HERMES_VENV_CACHE:-}" ]; then
  kept="$HERMES_VENV_CACHE/venv-$(cat "$ROOT/pyproject.toml" "$0" <(echo "$EXTRAS") | sha256sum | cut -c1-16)"
fi
if [ ! -e "$VENV" ] && [ -n "$kept" ] && [ -f "$kept/.complete" ]; then
  cp -al "$kept" "$VENV" && rm "$VENV/.complete"
  pipq install --no-deps -e "$ROOT"  # this checkout's hermesd (and its commands' first lines) in the copy
else
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  pipq install --upgrade pip
  pipq install -e "$ROOT$EXTRAS"
  fresh=1
fi
"$VENV/bin/python" -c "import hermesd" # the install above must have worked
# With the test extra: Atropos for tests/test_batch_atropos.py. atroposlib without its ~90
# dependencies (wandb, polars, gymnasium, nltk, fastapi…); its SFT loader, which only the sdist holds
# (environments/sft_loader_server.py), and what importing that loader needs beyond this venv, in
# $VENV/share/atropos (site/ is put last on the loader's sys.path: the venv's own packages win).
case "$EXTRAS" in *test*)
  pipq install --no-deps "atroposlib==0.4.0"
  atropos="$VENV/share/atropos" needs="aiofiles aiohttp jsonlines markdown pydantic-cli tenacity wandb"
  if [ "$(cat "$atropos/installed" 2>/dev/null)" != "$needs" ]; then
    rm -rf "$atropos"
    sdist=$(mktemp -d)
    pipq download --no-deps --no-binary :all: "atroposlib==0.4.0" -d "$sdist"
    tar -xzf "$sdist/atroposlib-0.4.0.tar.gz" -C "$sdist" atroposlib-0.4.0/environments/sft_loader_server.py
    # pip's resolver also lists what atroposlib itself lacks here (on purpose): not shown
    PIPQ_MORE="^WARNING: Target directory|^ERROR: pip's dependency resolver|^atroposlib .* requires " \
      pipq install --target "$atropos/site" $needs
    install -m 644 "$sdist/atroposlib-0.4.0/environments/sft_loader_server.py" "$atropos/sft_loader_server.py"
    rm -rf "$sdist"
    echo "$needs" > "$atropos/installed"
  fi ;;
esac
# Bytecode for the project's own modules: an editable install compiles nothing, and where
# PYTHONDONTWRITEBYTECODE is set (as on the CI machines) every cold child and every hermesctl
# would compile them again from source.
"$VENV/bin/python" -m compileall -q "$ROOT/hermesd" "$ROOT/child" "$ROOT/client" "$ROOT/batch" >/dev/null
# The daemon process runs under -OO (hermesd/daemon.py), which reads *.opt-2.pyc: those of what it
# imports (its own modules, pyzmq, msgpack; PyYAML for a reload).
"$VENV/bin/python" -OO -m compileall -q "$ROOT/hermesd" "$ROOT/batch" $("$VENV/bin/python" -c \
  'import os, msgpack, yaml, zmq; print(*(os.path.dirname(m.__file__) for m in (msgpack, yaml, zmq)))') >/dev/null
if "$VENV/bin/python" -m pip show -q llama-cpp-python >/dev/null 2>&1 \
    && ! why=$(cd "$ROOT" && "$VENV/bin/python" -m child.providers.llama_build 2>&1); then
  echo "install-venv.sh: ${why:-the installed llama-cpp-python crashed on this CPU}" >&2
  echo "install-venv.sh: rebuilding llama-cpp-python portably ($CMAKE_ARGS), about 10 minutes on 2 cores" >&2
  version=$("$VENV/bin/python" -m pip show llama-cpp-python | sed -n 's/^Version: //p')
  "$VENV/bin/python" -m pip cache remove 'llama_cpp_python*' >/dev/null 2>&1 || true
  "$VENV/bin/python" -m pip install -q --force-reinstall --no-deps "llama-cpp-python==$version"
  (cd "$ROOT" && "$VENV/bin/python" -m child.providers.llama_build)
fi
if [ -n "$kept" ] && [ -n "${fresh:-}" ] && [ ! -f "$kept/.complete" ]; then  # kept for the next run
  rm -rf "$kept" && mkdir -p "$(dirname "$kept")" && cp -al "$VENV" "$kept" && touch "$kept/.complete"
fi
