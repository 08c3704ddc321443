"""Rolling upgrades (docs/alerts.md, "Compatibility"): every reader of the versioned wire
objects takes a newer minor version with fields it does not know (ignored, at any
depth) as its own version, and refuses another major version with a clear error that
it counts: the stream codec, the models read directly, the webhook dispatcher (a real
redis-server and a real receiver) and ``callshield coverage``."""

from __future__ import annotations

import json

import pytest
import redis
from alert_factory import make_alert
from receiver import Receiver
from schema_future import future
from test_webhooks import _run, receiver, store, wh_settings  # noqa: F401 (fixtures)

from detectors.alert_schema import Alert, CallEvent, ScoreUpdate, SystemEvent, event_id
from detectors.bus.codec import UnsupportedSchemaVersionError, decode
from detectors.bus.keys import Keys
from detectors.bus.schema_export import examples
from detectors.bus.settings import BusSettings
from detectors.bus.webhooks.schedule import VirtualClock
from detectors.bus.webhooks.store import EndpointStore
from sip_bridge.cli import main

MODELS = {"alert": Alert, "score_update": ScoreUpdate, "call_event": CallEvent}
MODELS["system_event"] = SystemEvent  # type: ignore[assignment]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_newer_minor_with_unknown_fields_reads_as_this_version(name: str) -> None:
    message = examples()[name]
    assert isinstance(message, Alert | ScoreUpdate | CallEvent | SystemEvent)
    fields = future(message)
    assert "added_later" in fields["json"] and '"1.4"' in fields["json"]
    got = decode(fields)
    assert got == message and got.schema_version == "1.0"
    assert "added_later" not in got.model_dump_json()  # what it re-publishes: what it read
    assert MODELS[name].model_validate_json(fields["json"]) == message  # the direct reads


@pytest.mark.parametrize("name", sorted(MODELS))
def test_another_major_is_a_clear_error(name: str) -> None:
    message = examples()[name]
    assert isinstance(message, Alert | ScoreUpdate | CallEvent | SystemEvent)
    with pytest.raises(UnsupportedSchemaVersionError, match=r"major version '2\.0'.*reads 1\.x"):
        decode(future(message, "2.0"))
    with pytest.raises(ValueError, match="does not validate"):  # not a version at all
        decode(future(message, "latest"))


def test_webhooks_deliver_a_newer_minor_and_count_another_major(
    wh_settings: BusSettings,  # noqa: F811
    client: redis.Redis,
    store: EndpointStore,  # noqa: F811
    receiver: Receiver,  # noqa: F811
) -> None:
    _, secret = store.add(receiver.url, allow_private=True)
    receiver.secrets = [secret]
    keys = Keys(wh_settings.key_prefix)
    newer, other = make_alert(1), make_alert(2)
    client.xadd(keys.alerts, future(newer))  # type: ignore[arg-type]
    client.xadd(keys.alerts, future(other, "2.0"))  # type: ignore[arg-type]
    client.xadd(keys.alerts, future(make_alert(3), "1.0"))  # type: ignore[arg-type]
    d = _run(wh_settings, VirtualClock())
    assert set(receiver.first) == {event_id(newer), event_id(make_alert(3))}
    data = receiver.first[event_id(newer)]["data"]
    assert data["schema_version"] == "1.0" and "added_later" not in data
    assert Alert.model_validate(data) == newer
    assert d.stats["bad_entries"] == 1  # the 2.0 one: counted, dropped, acknowledged
    assert client.xpending(keys.alerts, "webhooks")["pending"] == 0


def test_coverage_cli_reads_a_newer_minor_and_counts_another_major(
    settings: BusSettings,
    client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    keys = Keys(settings.key_prefix)
    ended = examples()["call_event"]
    assert isinstance(ended, CallEvent)
    ended = ended.model_copy(update={"event": "ended"})
    client.xadd(keys.events, future(ended))  # type: ignore[arg-type]
    client.xadd(keys.events, future(ended.model_copy(update={"call_id": "x"}), "3.1"))  # type: ignore[arg-type]
    for name, value in (
        ("REDIS_URL", settings.redis_url.get_secret_value()),  # type: ignore[union-attr]
        ("CALLSHIELD_KEY_PREFIX", settings.key_prefix),
        ("CALLSHIELD_STATE_DIR", str(settings.state_dir)),
    ):
        monkeypatch.setenv(name, value)
    assert main(["coverage", "--since", "24h", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["calls"] == 1 and report["bad_entries"] == 1
