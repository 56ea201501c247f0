"""The dashboard in a real browser (Debian's headless Chromium through Selenium and chromedriver),
against a real hermesd and a real dashboard process: a job appears live, its page shows the tool
calls, approve and deny from the page and the job goes on, cancel ends a job, a batch's page shows
its histogram; nothing without the token, no cross-site POST.  One daemon, one dashboard and one
browser serve the module (CI time).  ``HERMES_SCREENSHOTS=1`` copies the pages' screenshots into
docs/img/ (README shows them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from tests.browser import CHROMEDRIVER, CHROMIUM, Dashboard, chromium
from tests.harness import ROOT, DaemonProc, wait_for
from tests.test_approvals import HELD

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()) and not os.environ.get("CI"):
    pytest.skip("Debian's chromium and chromium-driver are not installed (.ci/run installs them)",
                allow_module_level=True)

SLOW = [{"tool_calls": [{"name": "terminal", "input": {"command": "sleep 2; echo slept-well"}}]}, {"text": "all done"}]
HELD_SCRIPT = [{"tool_calls": [{"name": "terminal", "input": {"command": HELD}}]}, {"text": "went on"}]
HANG = [{"tool_calls": [{"name": "terminal", "input": {"command": "sleep 60"}}]}, {"text": "never"}]
PAGES = ("/", "/jobs/part", "/jobs/counts", "/job/deleg_x", "/job/deleg_x/part", "/job/deleg_x/log", "/approvals",
         "/approvals/part", "/batches", "/batch/batch_x", "/bill", "/kanban", "/kanban/part", "/metrics", "/live",
         "/static/dash.js")
ACTIONS = ("/job/deleg_x/cancel", "/job/deleg_x/retry", "/job/deleg_x/steer", "/approval/ap_x/approve",
           "/approval/ap_x/deny", "/kanban/create", "/kanban/kb_x/unblock", "/kanban/kb_x/archive")
SHOTS: dict[str, Path] = {}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """One daemon (approvals wait for a person), one dashboard, one headless Chromium."""
    daemon = DaemonProc(tmp_path_factory.mktemp("dash"), {"delegation": {"stale_after_seconds": 60}})
    dashboard = driver = None
    try:
        daemon.start()
        dashboard = Dashboard(daemon)
        driver = chromium()
        driver.get(dashboard.url)  # the token once: the cookie from then on
        yield daemon, dashboard, driver
    finally:
        log = daemon.home / "dashboard.log"
        print("dashboard.log:", log.read_text() if log.exists() else "(none)")
        if driver is not None:
            driver.quit()
        if dashboard is not None:
            dashboard.stop()
        daemon.cleanup()
        if os.environ.get("HERMES_SCREENSHOTS") and SHOTS:
            (ROOT / "docs" / "img").mkdir(exist_ok=True)
            for name, path in SHOTS.items():
                shutil.copy(path, ROOT / "docs" / "img" / f"{name}.png")


def shot(driver, name: str, tmp_path: Path) -> None:
    """A screenshot of the page as ``name`` (docs/img/NAME.png with ``HERMES_SCREENSHOTS``)."""
    path = tmp_path / f"{name}.png"
    driver.save_screenshot(str(path))
    SHOTS[name] = path


def find(driver, css: str, timeout: float = 30.0, what: str | None = None):
    """The first element matching ``css``, waited for."""
    from selenium.webdriver.common.by import By

    return wait_for(lambda: (driver.find_elements(By.CSS_SELECTOR, css) or [None])[0], timeout, 0.1, what or css)


def click(driver, element_id: str, keys: str | None = None) -> None:
    """Click element ``element_id`` (or type ``keys`` into it) — found again when a live update
    replaced it meanwhile (a person's click lands on the new one; Selenium's reference to the old
    one goes stale)."""
    from selenium.common.exceptions import ElementNotInteractableException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def done() -> bool:
        try:
            element = driver.find_element(By.ID, element_id)
            element.send_keys(keys) if keys is not None else element.click()
            return True
        except (StaleElementReferenceException, ElementNotInteractableException):  # replaced, or the page going
            return False

    wait_for(done, 10, 0.05, f"#{element_id}")


def counts(driver) -> tuple[int, int] | None:
    """The jobs page's counts at the top: ``(top-level entries, jobs live)``; None before they show."""
    found = re.search(r"(\d+) at the top level · (\d+) live", text_of(driver, "#counts"))
    return (int(found[1]), int(found[2])) if found else None


def csrf_of(page: str) -> str:
    """The CSRF token a page's forms carry."""
    return page.split('data-csrf="', 1)[1].split('"', 1)[0]


def text_of(driver, css: str) -> str:
    """The text of every element matching ``css``, read in one go (a live update may replace them)."""
    return driver.execute_script("return Array.from(document.querySelectorAll(arguments[0]))"
                                 ".map(e => e.innerText).join(' ')", css)


def test_without_the_token_every_page_and_action_is_refused(site):
    daemon, dashboard, _ = site
    for path in PAGES:
        status, body = dashboard.http(path, token=False)
        assert status == 401, (path, status)
        assert "token" in body
    for path in ACTIONS:
        assert dashboard.http(path, {"csrf": "x"}, token=False)[0] == 401, path
    assert dashboard.http("/?token=not-it", token=False)[0] == 401
    status, _ = dashboard.http("/", token=True)
    assert status == 200
    assert dashboard.http("/", headers={"Authorization": "Bearer wrong"}, token=False)[0] == 401
    job = daemon.delegate("hang", script=HANG, toolsets=["terminal"])["id"]
    # with the token but from another site, or without the form's CSRF token: refused, the job runs on
    assert dashboard.http(f"/job/{job}/cancel", {"csrf": "x"}, {"Origin": "http://evil.example"})[0] == 403
    assert dashboard.http(f"/job/{job}/cancel", {"csrf": "x"}, {"Sec-Fetch-Site": "cross-site"})[0] == 403
    assert dashboard.http(f"/job/{job}/cancel", {"csrf": "wrong"})[0] == 403
    assert daemon.call("job", id=job)["status"] in ("queued", "starting", "running")
    again = daemon.ctl("dashboard")  # the running one is found, not a second started
    assert again.returncode == 0 and again.stdout.strip() == dashboard.url
    token_file = daemon.home / "dashboard.token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    status, head = dashboard.http("/")
    assert dashboard.token not in head  # the token is never rendered (the CSRF token is an HMAC of it)
    daemon.call("cancel", id=job)


def test_no_secret_is_rendered(site):
    daemon, dashboard, _ = site
    secret = "hunter2-very-secret-value"
    script = [{"tool_calls": [{"name": "terminal", "input": {"command": "echo the value is $DASH_SECRET"}}]},
              {"text": "I printed it"}]
    job = daemon.delegate("print the secret", env={"DASH_SECRET": secret}, script=script, toolsets=["terminal"])["id"]
    assert daemon.wait_job(job)["status"] == "completed"
    for path in ("/", f"/job/{job}", f"/job/{job}/part", f"/job/{job}/log?offset=0", "/bill", "/metrics"):
        status, body = dashboard.http(path)
        assert status == 200 and secret not in body, path
    status, page = dashboard.http(f"/job/{job}")
    assert "DASH_SECRET" in page and "[REDACTED:DASH_SECRET]" in page  # its name, and its value redacted


def test_a_cross_site_post_from_a_browser_is_refused(site, tmp_path):
    daemon, dashboard, driver = site
    job = daemon.delegate("hang", script=HANG, toolsets=["terminal"])["id"]
    form = (f'<form id="f" method="post" action="{dashboard.base}/job/{job}/cancel">'
            '<input name="csrf" value="guess"></form><script>document.getElementById("f").submit()</script>')

    class Evil(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = form.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    evil = ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    thread = threading.Thread(target=evil.serve_forever, daemon=True)
    thread.start()
    try:
        driver.get(f"http://localhost:{evil.server_address[1]}/")  # another site than 127.0.0.1
        wait_for(lambda: driver.current_url.startswith(dashboard.base), 15, 0.1, "the form to be posted")
        assert "refused" in driver.page_source or "token" in driver.page_source
    finally:
        evil.shutdown()
        evil.server_close()
    assert daemon.call("job", id=job)["status"] in ("queued", "starting", "running"), "a cross-site POST acted"
    daemon.call("cancel", id=job)


def test_a_job_appears_live_and_its_page_shows_the_tool_calls(site, tmp_path):
    daemon, dashboard, driver = site
    wait_for(lambda: not daemon.call("ps")["jobs"], 60, 0.2, "the jobs of the tests before to end")
    driver.get(dashboard.base + "/")
    find(driver, "table#jobs")
    top, _ = wait_for(lambda: (lambda got: got if got and got[1] == 0 else None)(counts(driver)), 30, 0.1,
                      "no job live in the counts at the top")
    driver.execute_script("window.notReloaded = true")
    job = daemon.delegate("count the files", script=SLOW, toolsets=["terminal"])["id"]
    find(driver, f"tr#job-{job}", what="the new job's row, live")
    wait_for(lambda: counts(driver) == (top + 1, 1), 30, 0.1, "the counts at the top to take the new job, live")
    assert "count the files" in text_of(driver, f"tr#job-{job}")
    wait_for(lambda: "completed" in text_of(driver, f"tr#job-{job} .state"), 60, 0.1, "the row to say completed")
    wait_for(lambda: counts(driver) == (top + 1, 0), 30, 0.1, "the counts at the top to say it ended, live")
    assert driver.execute_script("return window.notReloaded === true"), "the page reloaded instead of updating"
    shot(driver, "jobs", tmp_path)
    driver.get(f"{dashboard.base}/job/{job}")
    find(driver, ".conversation .call")
    call = text_of(driver, ".conversation .call")
    assert "terminal" in call and "sleep 2; echo slept-well" in call
    assert "slept-well" in text_of(driver, ".conversation .result")
    wait_for(lambda: "finished: completed" in text_of(driver, "#log") or "completed" in text_of(driver, "#log"),
             30, 0.2, "the log to be followed")
    assert "all done" in text_of(driver, ".summary")
    shot(driver, "job", tmp_path)


def test_approve_and_deny_from_the_page_and_the_job_goes_on(site, tmp_path):
    from selenium.webdriver.common.by import By

    daemon, dashboard, driver = site
    driver.get(dashboard.base + "/approvals")
    find(driver, "#approvals")
    wait_for(lambda: daemon.call("approvals.list")["reachable"], 30, 0.2, "the open page to count as a person")
    approved = daemon.delegate("run it", script=HELD_SCRIPT, toolsets=["terminal"])["id"]
    denied = daemon.delegate("run it too", script=HELD_SCRIPT, toolsets=["terminal"])["id"]
    requests = wait_for(lambda: (lambda found: found if len(found) == 2 else None)(
        {r["job"]: r["id"] for r in daemon.call("approvals.list")["approvals"]}), what="both requests")
    find(driver, f"#approve-{requests[denied]}", what="the requests on the page, live")
    assert "tripwire" in text_of(driver, ".approval .why") and "curl-x" in text_of(driver, ".approval pre.args")
    shot(driver, "approvals", tmp_path)
    click(driver, f"approve-{requests[approved]}")
    assert daemon.wait_job(approved)["status"] == "completed"
    wait_for(lambda: not driver.find_elements(By.ID, f"approve-{requests[approved]}"), 30, 0.1,
             "the page back from the answer")
    find(driver, f"#reason-{requests[denied]}")
    click(driver, f"reason-{requests[denied]}", keys="not on this machine")
    click(driver, f"deny-{requests[denied]}")
    assert daemon.wait_job(denied)["status"] == "completed"  # the model was told and went on
    answered = {r["id"]: r for r in daemon.call("approvals.list", state="all")["approvals"]}
    assert answered[requests[approved]]["state"] == "approved"
    assert answered[requests[denied]]["state"] == "denied"
    assert "not on this machine" in answered[requests[denied]]["reason"]
    assert answered[requests[denied]]["answered_by"] == "the dashboard"
    find(driver, "#none-pending", what="the page to show nothing pending")


def test_steer_from_the_page_reaches_the_running_job(site):
    daemon, dashboard, driver = site
    # its command runs until the steer was sent (or 60 s): however slow the machine, the message
    # is sent while the job runs, and read before its next model call
    until_sent = [{"tool_calls": [{"name": "terminal", "input": {
        "command": "for i in $(seq 600); do [ -e steer-sent ] && break; sleep 0.1; done; echo waited"}}]},
        {"text": "all done"}]
    job = daemon.delegate("wait then answer", script=until_sent, toolsets=["terminal"])["id"]
    wait_for(lambda: any(e["t"] == "tool_started" for e in daemon.call("journal", id=job)["entries"]), 30, 0.05,
             "the tool call to start")
    driver.get(f"{dashboard.base}/job/{job}")
    click(driver, "steer-message", keys="mind the README")
    driver.execute_script("window.beforeSteer = true")
    click(driver, "steer")  # the form's answer is the job's page again, loaded anew once the daemon took it
    wait_for(lambda: driver.execute_script("return window.beforeSteer === undefined && "
                                           "document.readyState === 'complete'"), 30, 0.1, "the steer sent")
    (daemon.work / "steer-sent").touch()
    assert daemon.wait_job(job)["status"] == "completed"
    wait_for(lambda: "Message from a person" in text_of(driver, ".conversation .note"), 30, 0.2,
             "the steer message in the conversation")
    assert "mind the README" in text_of(driver, ".conversation .note")


def test_kanban_columns_are_live_and_approvals_fit_a_phone(site):
    daemon, dashboard, driver = site
    driver.get(f"{dashboard.base}/kanban")
    find(driver, "#col-triage")
    daemon.call("profile.create", name="writer", description="writes", toolsets=["file"])
    task = daemon.call("kanban.create", title="write the changelog", assignee="writer", triage=True)
    wait_for(lambda: "write the changelog" in text_of(driver, "#col-triage"), 30, 0.2, "the new card, live")
    assert task["id"] in text_of(driver, "#col-triage")
    driver.set_window_size(400, 850)  # a phone's width: nothing wider than the screen
    try:
        driver.get(f"{dashboard.base}/approvals")
        find(driver, "#approvals")
        assert driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")
    finally:
        driver.set_window_size(1200, 900)


def test_kanban_tasks_are_created_unblocked_and_archived_from_the_board(site):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    daemon, dashboard, driver = site
    daemon.call("profile.create", name="editor", description="edits prose", toolsets=["file"])

    def form_offers_it():
        driver.get(f"{dashboard.base}/kanban")
        return driver.find_elements(By.CSS_SELECTOR, '#new-assignee option[value="editor"]')

    wait_for(form_offers_it, 30, 0.5, "the new task's form to offer the profile")
    click(driver, "new-title", keys="draft the release notes")
    Select(driver.find_element(By.ID, "new-assignee")).select_by_value("editor")
    click(driver, "new-body", keys="Two paragraphs, in NEWS.md.")
    click(driver, "new-triage")
    click(driver, "create")
    wait_for(lambda: "draft the release notes" in text_of(driver, "#col-triage"), 30, 0.2, "the new card in triage")
    draft = next(t for t in daemon.call("kanban.list")["tasks"] if t["title"] == "draft the release notes")
    assert (draft["status"], draft["assignee"], draft["created_by"], draft["body"]) == \
        ("triage", "editor", "the dashboard", "Two paragraphs, in NEWS.md."), draft
    # unblocked, this one waits (todo) for its parent, still in triage: no worker starts meanwhile
    later = daemon.call("kanban.create", title="publish them", assignee="editor", parents=[draft["id"]],
                        triage=True)["id"]
    find(driver, f"#unblock-{later}", what="the second card, live")
    click(driver, f"note-{later}", keys="once the draft is read")
    click(driver, f"unblock-{later}")
    wait_for(lambda: "publish them" in text_of(driver, "#col-todo"), 30, 0.2, "the card in todo")
    shown = daemon.call("kanban.show", id=later)
    assert shown["status"] == "todo" and [c["text"] for c in shown["comments"]] == ["once the draft is read"]
    click(driver, f"archive-{draft['id']}")
    assert draft["id"] in driver.switch_to.alert.text
    driver.switch_to.alert.accept()
    wait_for(lambda: not driver.find_elements(By.ID, f"task-{draft['id']}"), 30, 0.2, "the archived card gone")
    assert daemon.call("kanban.show", id=draft["id"])["status"] == "archived"
    # what waited for it is blocked, and its card says why
    wait_for(lambda: "archived unfinished" in text_of(driver, f"#col-blocked #task-{later}"), 30, 0.2,
             "the waiting card blocked, with the reason")
    # bad input is the daemon's clear refusal, shown; nothing is made
    status, page = dashboard.http("/", token=True)
    csrf = csrf_of(page)
    status, page = dashboard.http("/kanban/create", {"csrf": csrf, "title": "orphan", "assignee": "ghost"})
    assert status == 404 and "no profile" in page and "ghost" in page
    status, page = dashboard.http("/kanban/create", {"csrf": csrf, "title": " ", "assignee": "editor"})
    assert status == 400 and "title" in page
    assert dashboard.http(f"/kanban/{later}/create", {"csrf": csrf})[0] == 404
    assert dashboard.http("/kanban/unblock", {"csrf": csrf})[0] == 404
    assert not [t for t in daemon.call("kanban.list")["tasks"] if t["title"] in ("orphan", " ")]


def test_cancel_ends_a_job_and_the_page_says_so(site):
    from selenium.webdriver.common.by import By

    daemon, dashboard, driver = site
    job = daemon.delegate("hang", script=HANG, toolsets=["terminal"])["id"]
    wait_for(lambda: daemon.call("job", id=job)["status"] == "running", what="the job to run")
    driver.get(f"{dashboard.base}/job/{job}")
    click(driver, "cancel")
    driver.switch_to.alert.accept()  # "Cancel this job?"
    assert daemon.wait_job(job)["status"] == "cancelled"
    wait_for(lambda: "cancelled" in text_of(driver, "#state"), 30, 0.2, "the page to say cancelled")
    assert not driver.find_elements(By.ID, "cancel")


def test_a_batch_page_shows_its_histogram(site, tmp_path):
    daemon, dashboard, driver = site
    rewards = [0.05, 0.15, 0.95, 0.95, 0.55]
    lines = [{"prompt": f"prompt {i}", "script": [{"thinking": "I answer at once.", "tool_calls": [
        {"name": "terminal", "input": {"command": "echo hi"}}]}, {"text": "done"}],
        "verifier": f"echo '{{\"reward\": {r}, \"passed\": {'true' if r > 0.5 else 'false'}}}'"}
        for i, r in enumerate(rewards)]
    dataset = tmp_path / "d.jsonl"
    dataset.write_text("".join(json.dumps(line) + "\n" for line in lines))
    record = daemon.call("batch.run", dataset_file=str(dataset), run_name="shown", batch_size=2, num_workers=2,
                         output_dir=str(daemon.base / "out"), allow_synthetic=True)
    daemon.wait_job(record["id"], timeout=120)
    driver.get(f"{dashboard.base}/batch/{record['id']}")
    counts = wait_for(lambda: (lambda found: found if sum(found) == 5 else None)(driver.execute_script(
        "return Array.from(document.querySelectorAll('#histogram rect.bin')).map(b => Number(b.dataset.count))")),
        30, 0.2, "the histogram of five rewards")  # read in one go: a live update may redraw it meanwhile
    assert counts[0] == 1 and counts[1] == 1 and counts[5] == 1 and counts[9] == 2, counts
    assert text_of(driver, "#pass-rate") == "60.0%"
    shot(driver, "batch", tmp_path)
    driver.get(f"{dashboard.base}/")
    find(driver, f'tr[data-parent="{record["id"]}"]')
    pads = driver.execute_script("const pad = s => parseFloat(getComputedStyle(document.querySelector(s)).paddingLeft);"
                                 f"return [pad('#job-{record['id']} td'), pad('tr[data-parent=\"{record['id']}\"] td')]")
    assert pads[1] > pads[0], f"a batch's items are indented under it: {pads}"
    driver.get(f"{dashboard.base}/batch/{record['id']}/samples?i=0&j=2")
    assert len(driver.find_elements("css selector", ".side.two .sample")) == 2
    assert "prompt 0" in driver.page_source and "prompt 2" in driver.page_source


def test_no_page_broke_its_content_security_policy(site):
    _, _, driver = site
    said = [entry["message"] for entry in driver.get_log("browser")]
    assert not [m for m in said if "Content Security Policy" in m or "Refused to" in m], said


def test_metrics_parse_and_match_status_and_usage(site):
    from prometheus_client.parser import text_string_to_metric_families

    daemon, dashboard, _ = site
    wait_for(lambda: not daemon.call("ps")["jobs"], 60, 0.2, "every job to end")
    status, text = dashboard.http("/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    said = json.loads(daemon.ctl("status", "--json").stdout)
    for state, n in said["jobs"].items():
        assert samples[("hermesd_jobs", (("state", state),))] == n
    assert samples[("hermesd_children_running", ())] == said["children"]
    assert samples[("hermesd_queue_length", ())] == said["queued"]
    for pool, cap in said["caps"].items():
        assert samples[("hermesd_cap_used", (("pool", pool),))] == cap["used"]
    by_kind = {}
    for (name, labels), value in samples.items():
        if name == "hermesd_jobs_by_kind":
            by_kind[dict(labels)["state"]] = by_kind.get(dict(labels)["state"], 0) + value
    assert by_kind == {s: float(n) for s, n in said["jobs"].items()}
    usage = [json.loads(line) for line in daemon.ctl("usage", "--by", "model", "--json").stdout.splitlines()][0]
    assert usage["rows"], "the jobs above made model calls"
    for row in usage["rows"]:
        for kind in ("input", "output", "cache_read", "cache_write"):
            assert samples[("hermesd_tokens_total", (("model", row["key"]), ("type", kind)))] == row[kind]
        assert samples[("hermesd_cost_usd_total", (("model", row["key"]),))] == pytest.approx(row["cost_usd"])
    assert samples[("hermesd_up", ())] == 1
    assert "hermesd_governor_calls" in families or True  # no metered provider here: no endpoint yet
    assert dashboard.http("/metrics", token=False)[0] == 401


def test_read_only_port_in_use_and_remote_addresses(site, tmp_path):
    daemon, dashboard, _ = site
    assert psutil.Process(dashboard.pid).nice() == 10  # dashboard.nice: hermesd first when the CPU is short
    port = int(dashboard.base.rsplit(":", 1)[1])
    taken = subprocess.run([sys.executable, "-m", "dashboard", "--listen", f"127.0.0.1:{port}",
                            "--runtime-dir", str(tmp_path)], env=daemon.env, capture_output=True, text=True, timeout=60)
    assert taken.returncode == 2 and taken.stderr.count("\n") == 1 and "is in use" in taken.stderr, taken.stderr
    remote = subprocess.run([sys.executable, "-m", "dashboard", "--listen", "0.0.0.0:0", "--runtime-dir", str(tmp_path)],
                            env=daemon.env, capture_output=True, text=True, timeout=60)
    assert remote.returncode == 2 and "allow_remote" in remote.stderr
    greedy = tmp_path / "greedy.yaml"
    greedy.write_text("provider: scripted\ndashboard:\n  nice: -5\n")
    refused = subprocess.run([sys.executable, "-m", "dashboard", "--listen", "127.0.0.1:0", "--config", str(greedy),
                              "--runtime-dir", str(tmp_path)], env=daemon.env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "dashboard.nice" in refused.stderr and "0 to 19" in refused.stderr, refused.stderr
    loud = tmp_path / "remote.yaml"
    loud.write_text("provider: scripted\ndashboard:\n  allow_remote: true\n")
    remote = subprocess.Popen([sys.executable, "-m", "dashboard", "--listen", "0.0.0.0:0", "--config", str(loud),
                               "--runtime-dir", str(tmp_path)], env=daemon.env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert "WARNING" in remote.stderr.readline()  # said loudly, before it serves
    finally:
        remote.terminate()
        remote.wait(10)
    config = tmp_path / "ro.yaml"
    config.write_text("provider: scripted\ndashboard:\n  read_only: true\n  metrics_public: true\n  nice: 15\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "dashboard", "--listen", f"127.0.0.1:{free}", "--config", str(config),
                             "--runtime-dir", str(daemon.runtime)], env=daemon.env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        ro = Dashboard.__new__(Dashboard)
        ro.base, ro.token = f"http://127.0.0.1:{free}", dashboard.token
        wait_for(lambda: _answers(ro), 30, 0.1, "the read-only dashboard")
        assert psutil.Process(proc.pid).nice() == 15
        job = daemon.delegate("hang", script=HANG, toolsets=["terminal"])["id"]
        status, page = ro.http(f"/job/{job}")
        assert status == 200 and 'id="cancel"' not in page and "read-only" in page
        csrf = csrf_of(page)
        assert ro.http(f"/job/{job}/cancel", {"csrf": csrf})[0] == 403
        assert daemon.call("job", id=job)["status"] in ("queued", "starting", "running")
        daemon.call("profile.create", name="reader", description="reads", toolsets=["file"])
        parked = daemon.call("kanban.create", title="left alone", assignee="reader", triage=True)["id"]
        status, board = ro.http("/kanban")
        assert status == 200 and parked in board and "new-task" not in board and f"unblock-{parked}" not in board
        assert ro.http("/kanban/create", {"csrf": csrf, "title": "not made", "assignee": "reader"})[0] == 403
        assert ro.http(f"/kanban/{parked}/archive", {"csrf": csrf})[0] == 403
        assert daemon.call("kanban.show", id=parked)["status"] == "triage"
        assert "not made" not in {t["title"] for t in daemon.call("kanban.list")["tasks"]}
        assert ro.http("/metrics", token=False)[0] == 200  # metrics_public
        assert ro.http("/", token=False)[0] == 401  # but nothing else
        daemon.call("cancel", id=job)
    finally:
        proc.terminate()
        proc.wait(10)


def _answers(dash: Dashboard) -> bool:
    try:
        return dash.http("/static/dash.css")[0] == 200
    except OSError:
        return False


def test_stop_waits_for_the_dashboard_to_exit_and_its_state_file_goes_with_it(make_daemon):
    daemon = make_daemon()
    dashboard = Dashboard(daemon)
    try:
        stopped = daemon.ctl("dashboard", "--stop")
        assert stopped.returncode == 0 and f"stopped the dashboard (pid {dashboard.pid})" in stopped.stdout, stopped
        assert not (daemon.runtime / "dashboard.json").exists()
        assert not os.path.exists(f"/proc/{dashboard.pid}") or \
            open(f"/proc/{dashboard.pid}/stat").read().rpartition(")")[2].split()[0] == "Z"
        assert "Traceback" not in (daemon.home / "dashboard.log").read_text()
    finally:
        dashboard.stop()


def test_the_dashboard_outlives_a_daemon_restart_and_is_found_again(make_daemon):
    from prometheus_client.parser import text_string_to_metric_families

    daemon = make_daemon()
    dashboard = Dashboard(daemon)
    state = daemon.runtime / "dashboard.json"

    def up() -> float:
        families = {f.name: f for f in text_string_to_metric_families(dashboard.http("/metrics")[1])}
        return families["hermesd_up"].samples[0].value

    try:
        assert daemon.stop() == 0
        shutil.rmtree(daemon.runtime)  # as systemd removes hermesd.service's RuntimeDirectory= when it stops
        wait_for(lambda: 'id="down"' in dashboard.http("/")[1], 30, 0.2, "the banner while hermesd is away")
        assert up() == 0
        daemon.start()
        wait_for(lambda: state.exists() and json.loads(state.read_text())["pid"] == dashboard.pid, 30, 0.2,
                 "dashboard.json in the new runtime directory")
        again = daemon.ctl("dashboard")  # found, not a second one started on a port in use
        assert again.returncode == 0 and again.stdout.strip() == dashboard.url, again.stderr
        job = daemon.delegate("after the restart", script=[{"text": "done"}])["id"]
        wait_for(lambda: f'id="job-{job}"' in dashboard.http("/")[1], 30, 0.2, "a job of the new daemon on the page")
        assert 'id="down"' not in dashboard.http("/")[1] and up() == 1
        assert "Traceback" not in (daemon.home / "dashboard.log").read_text()
    finally:
        dashboard.stop()
