"""`callshield demo` end to end, as a new user runs it: the real command as a subprocess,
which derives the speaker model into an empty models directory, starts redis-server,
the bridge, the dashboard and the webhook dispatcher, and places SIPREC calls of real
speech into the bridge. Checked from outside: the printed dashboard URL and login work,
the replay, watch-list and spoofed caller-ID calls' alerts are in Redis (the spoofed
call's failed Identity verdict in its call event too), webhooks were delivered, and
SIGINT ends it with exit 0 and no process left behind. Also `--media-core`: real UDP,
relays, the ingest thread."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from detectors.alert_schema import Alert, CallEvent
from detectors.bus.codec import decode
from detectors.bus.keys import Keys
from sip_bridge.cli import main


def _descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc's children lists)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            for k in map(int, kids):
                if k not in found:
                    found.add(k)
                    todo.append(k)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _lines(proc: subprocess.Popen[str], until: str, timeout: float) -> Iterator[str]:
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"demo ended (rc {proc.poll()}) before {until!r}")
        yield line.rstrip("\n")
        if until in line:
            return
    raise AssertionError(f"no {until!r} within {timeout} s")


def _login(url: str, user: str, password: str) -> dict[str, str]:
    req = urllib.request.Request(
        url + "/api/v1/auth/login",
        data=json.dumps({"username": user, "password": password}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        me: dict[str, str] = json.loads(resp.read())
        return me


def test_demo_starts_everything_places_calls_and_stops_cleanly(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "sip_bridge.cli", "demo", "--models-dir", str(tmp_path)]
    cmd += ["--seconds", "12", "--settle", "4"]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    out: list[str] = []
    children: set[int] = set()
    try:
        for line in _lines(proc, "calls of ~", 240):
            out.append(line)
            children |= _descendants(proc.pid)
        text = "\n".join(out)
        assert "derived speaker model" in text and "derived speaker cohort" in text
        dash = re.search(
            r"dashboard: (http://127\.0\.0\.1:\d+)\s+login: (\S+)\s+password: (\S+)", text
        )
        assert dash, text
        redis_url = re.search(r"redis:\s+(redis://\S+)", text)
        assert redis_url, text
        assert re.search(r"setup: \d+\.\d s from start to the first call placed", text)
        for line in _lines(proc, "webhooks delivered:", 120):
            out.append(line)
        me = _login(dash[1], dash[2], dash[3])
        assert me["name"] == dash[2] and me["role"] == "admin"
        client = redis.Redis.from_url(redis_url[1])
        keys = Keys("callshield:")
        got: Any = (client.xrange(keys.alerts), client.xrange(keys.events))
        alerts = [m for _, f in got[0] if isinstance(m := decode(f), Alert)]
        events = [m for _, f in got[1] if isinstance(m := decode(f), CallEvent)]
        client.close()
        children |= _descendants(proc.pid)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
        out += rest.splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "\n".join(out)
    assert proc.returncode == 0, text[-3000:]
    assert len(children) >= 4  # redis-server, bridge, dashboard, webhook dispatcher
    assert not [pid for pid in children if _alive(pid)], "children left running"
    tmp = re.search(r"temporary files: (\S+)", text)
    assert tmp and not Path(tmp[1]).exists(), "temporary directory left"

    # Redis: the replay, watch-list and caller_id alerts, the spoofed call's failed check
    dims = {a.dimension.value for a in alerts}
    assert {"replay", "known_fraudster", "caller_id"} <= dims, text
    verdicts = {
        e.call_id: e.identity.verification for e in events if e.event == "started" and e.identity
    }
    assert sorted(verdicts.values()).count("failed") == 1
    # the summary per call: only the later copy of the recording is a replay
    summary = {ln.split()[0]: ln.rstrip() for ln in text.splitlines() if ln.startswith("  ")}
    assert summary["replay-2"].endswith("replay high"), summary["replay-2"]
    assert summary["replay-1"].endswith("no alert"), summary["replay-1"]
    assert "known_fraudster" in summary["watchlisted"]
    assert "caller_id high" in summary["spoofed-ani"], summary["spoofed-ani"]
    assert "Identity failed (unsupported_alg)" in summary["spoofed-ani"]
    caller = [a for a in alerts if a.dimension.value == "caller_id"]
    assert {a.call_id for a in caller} == {
        e.call_id for e in events if e.identity and e.identity.verification == "failed"
    }
    for name in ("genuine-1", "genuine-2"):
        assert summary[name].endswith("no alert"), summary[name]
    hooks = re.search(r"webhooks delivered: (\d+) \((\d+) with a valid signature\)", text)
    assert hooks and int(hooks[1]) >= 2 and hooks[1] == hooks[2]
    assert "stopped: calls ended, children stopped, temporary files removed" in text


def test_media_core_reports_every_leg_and_clean_audio_arrives_intact(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--media-core", "--seconds", "2", "--calls", "2"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("call ")]
    assert len(rows) == 4
    clean = [r for r in rows if "(clean)" in r]
    assert len(clean) == 2
    for row in clean:
        fields = row.split(")")[1].split()
        received, lost, late = int(fields[0]), int(fields[1]), int(fields[2])
        assert received >= 95 and lost == 0 and late == 0
        assert fields[-1] == "100.0%"  # every real sample is the one that was sent
    lossy = [r for r in rows if "(2% loss)" in r]
    assert all(re.search(r"\d+\.\d+%$", r) for r in lossy)
    assert "arrival (kernel timestamp) -> jitter buffer" in out
