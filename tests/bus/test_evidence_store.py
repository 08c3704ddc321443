"""Evidence records under ``callshield redis-acl`` on a real redis-server: the bridge's
user writes sealed records through the real writer script, the dashboard's user reads
them and sets or lifts a legal hold but cannot write, forge or delete a record; a
record opens only with its key, for its call and id."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
import redis.asyncio
from pydantic import SecretStr

from detectors.bus.evidence import (
    EvidenceKind,
    EvidenceMeta,
    EvidenceSettings,
    EvidenceVault,
    load_evidence_vault,
    wav_bytes,
)
from detectors.bus.evidence_store import EvidenceReader, EvidenceWriter
from detectors.bus.keys import Keys
from detectors.bus.redis_server import RedisServer
from sip_bridge.cli import main

PREFIX = "cs-ev:"


def _meta(call_id: str, ttl_s: int, eid: str = "clip:a1") -> EvidenceMeta:
    now = datetime.now(UTC)
    return EvidenceMeta(
        kind=EvidenceKind.CLIP,
        evidence_id=eid,
        tenant="default",
        call_id=call_id,
        node_id="n1",
        alert_id="a1",
        created_at=now,
        expires_at=now + timedelta(seconds=ttl_s),
        samples=4,
    )


def test_vault_binds_records_to_key_call_and_id(tmp_path: Path) -> None:
    vault = load_evidence_vault(EvidenceSettings(), tmp_path)
    assert oct((tmp_path / "evidence.key").stat().st_mode)[-3:] == "600"
    again = load_evidence_vault(EvidenceSettings(), tmp_path)  # the same file: same key
    meta = _meta("c1", 60)
    blob = vault.seal(meta, b"\x01\x00\x02\x00")
    assert again.open(meta, blob) == b"\x01\x00\x02\x00"
    for other in (
        meta.model_copy(update={"call_id": "c2"}),
        meta.model_copy(update={"evidence_id": "clip:a2"}),
    ):
        with pytest.raises(ValueError, match="does not open"):
            vault.open(other, blob)
    with pytest.raises(ValueError, match="does not open"):
        EvidenceVault(b"\x07" * 32).open(meta, blob)
    spec = EvidenceSettings(key=SecretStr("literal:" + "ab" * 32))
    assert (
        load_evidence_vault(spec, tmp_path / "none").open(
            meta, load_evidence_vault(spec, tmp_path / "none").seal(meta, b"x")
        )
        == b"x"
    )
    with pytest.raises(ValueError, match="32 bytes"):
        load_evidence_vault(EvidenceSettings(key=SecretStr("literal:short")), tmp_path)
    assert wav_bytes(b"\x00\x00" * 8)[:4] == b"RIFF"


def test_bridge_writes_dashboard_reads_and_holds_under_acl(
    redis_server: RedisServer,
    tmp_path: Path,
    client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    monkeypatch.setenv("CALLSHIELD_KEY_PREFIX", PREFIX)
    folder = tmp_path / "acl"
    assert main(["redis-acl", "--password-dir", str(folder)]) == 0
    pw = {p.stem: p.read_text().strip() for p in folder.glob("*.password")}
    url = f"redis://{{}}:{{}}@127.0.0.1:{redis_server.port}/0"
    keys = Keys(PREFIX)
    vault = EvidenceVault(b"\x05" * 32)

    bridge = redis.Redis.from_url(url.format("bridge", pw["bridge"]), socket_timeout=5)
    writer = EvidenceWriter(bridge, keys, receipt_grace_s=100)
    held_meta, short_meta = _meta("c1", 100), _meta("c2", 1)
    writer.write(held_meta, vault.seal(held_meta, b"\x01\x00"))
    writer.write(short_meta, vault.seal(short_meta, b"\x02\x00"))
    assert 90 < client.ttl(keys.evidence("c1", "clip:a1")) <= 100
    assert 190 < client.ttl(keys.evidence_index("c1")) <= 200
    assert b"\x01\x00" not in (client.hget(keys.evidence("c1", "clip:a1"), "blob") or b"")[14:]

    dash_url = url.format("dashboard", pw["dashboard"])
    dash = redis.Redis.from_url(dash_url, socket_timeout=5)
    for forge in (
        lambda: dash.hset(keys.evidence("c1", "clip:a1"), "blob", b"forged"),
        lambda: dash.delete(keys.evidence("c1", "clip:a1")),
        lambda: dash.hset(keys.evidence_index("c9"), "clip:x", "{}"),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            forge()

    async def as_dashboard() -> None:
        r = redis.asyncio.Redis.from_url(dash_url, socket_timeout=5)
        reader = EvidenceReader(r, keys, receipt_grace_s=100)
        (receipt,) = await reader.receipts("c1")
        assert receipt.alert_id == "a1" and receipt.expires_at == held_meta.expires_at
        found = await reader.record("c1", "clip:a1")
        assert found is not None and vault.open(*found) == b"\x01\x00"
        assert await reader.hold("c1") == 1
        assert client.ttl(keys.evidence("c1", "clip:a1")) == -1
        assert client.ttl(keys.evidence_index("c1")) == -1
        # the bridge writing more for a held call keeps the index without expiry
        more = _meta("c1", 100, "embedding")
        writer.write(more, vault.seal(more, b"\x03"))
        assert client.ttl(keys.evidence_index("c1")) == -1
        await reader.release("c1")
        assert 90 < client.ttl(keys.evidence("c1", "clip:a1")) <= 100
        await asyncio.sleep(2.1)  # c2's record outlives nothing: gone, its receipt stays
        assert await reader.record("c2", "clip:a1") is None
        assert [r.evidence_id for r in await reader.receipts("c2")] == ["clip:a1"]
        await r.aclose()

    asyncio.run(as_dashboard())
    bridge.close()
    dash.close()
