"""A batch that failed says so: ``hermes-batch`` exits 11 naming how many prompts failed and why,
and ``--resume`` runs them again (real daemon, real CLI, the fake Anthropic server)."""

from __future__ import annotations

import threading

from tests.fakes.anthropic_server import Error, FakeAnthropic, Message, last_user_text, text_block, thinking_block
from tests.test_batch_daemon import hermes_batch, write_dataset
from tests.test_governor import warm


def test_failed_prompts_exit_11_with_the_commonest_errors_and_resume_runs_them_again(make_daemon, tmp_path):
    refused: set[str] = set()
    lock = threading.Lock()

    def reply(request):
        prompt = last_user_text(request)
        with lock:
            first = prompt.startswith("bad") and prompt not in refused
            refused.add(prompt)
        if first:  # refused once, for good: not a rate limit
            return Error(400, "this prompt is refused")
        return Message([thinking_block("This prompt is fine to answer."), text_block("done")])

    dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in ("good 1", "bad 1", "good 2", "bad 2")])
    with FakeAnthropic() as api:
        api.default = reply
        daemon = warm(make_daemon({"provider": "anthropic", "base_url": api.url, "model": "claude-fake"}))
        failed = hermes_batch(daemon, "--dataset_file", str(dataset), "--batch_size", "2", "--run_name", "f",
                              "--num_workers", "2")
        assert failed.returncode == 11, (failed.stdout, failed.stderr)
        assert "2 of 4 prompts failed; hermes-batch --run_name f --resume runs them again" in failed.stderr
        assert "  2 × Anthropic API error 400: invalid_request_error: this prompt is refused" in failed.stderr
        resumed = hermes_batch(daemon, "--run_name", "f", "--resume")
        assert resumed.returncode == 0, (resumed.stdout, resumed.stderr)
        assert "4 of 4 prompts written" in resumed.stdout
    assert sorted(last_user_text(r) for r in api.requests) == ["bad 1", "bad 1", "bad 2", "bad 2", "good 1", "good 2"]
