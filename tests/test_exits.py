"""How a job's crash or timeout is told (``hermesd.exits``): never a bare "status -11"."""

from __future__ import annotations

from hermesd.exits import LOCAL_MODEL_HINT, Doing, exit_error, signal_name, timeout_error


def test_local_model_crash_names_the_model_the_signal_and_what_to_do():
    doing = Doing()
    doing.update({"activity": "waiting for the model's first reply", "provider": "local",
                  "model": "SmolLM2-135M-Instruct", "api_calls": 0})
    error = exit_error(-11, doing, None)
    assert error.startswith("child process killed by SIGSEGV (exit status -11) while waiting for the model's "
                            "first reply (0 model calls completed) before reporting a result: ")
    assert error.endswith(LOCAL_MODEL_HINT)
    assert "SmolLM2" in error and "GGML_NATIVE=OFF" in error and "ANTHROPIC_API_KEY" in error
    assert LOCAL_MODEL_HINT in exit_error(-4, Doing(), "local")  # SIGILL, the job's provider from its row


def test_other_exits_get_no_local_model_hint():
    assert LOCAL_MODEL_HINT not in exit_error(-11, Doing(provider="anthropic"), "local")
    assert LOCAL_MODEL_HINT not in exit_error(-9, Doing(provider="local"), None)  # SIGKILL: stopped, not a crash
    assert exit_error(3, Doing(), None) == "child exited with status 3 before reporting a result"
    assert signal_name(-9) == "SIGKILL" and signal_name(0) is None and signal_name(None) is None


def test_timeout_error_says_what_it_was_waiting_for():
    doing = Doing(activity="in tool terminal running `pytest -x`", api_calls=3)
    assert timeout_error(600.0, doing) == "timed out after 600 s in tool terminal running `pytest -x` (3 model calls completed)"
    assert timeout_error(5.0, Doing()) == "timed out after 5 s"
