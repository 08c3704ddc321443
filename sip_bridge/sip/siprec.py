"""SIPREC recording metadata (RFC 7865 ``application/rs-metadata+xml``) as dataclasses
with ``parse()`` and ``__bytes__()``, and the mapping of its streams to leg roles.

Lenient the way real recording clients need: element names are matched on their local
name whatever the namespace or prefix (RFC 7865 ``urn:ietf:params:xml:ns:recording:1``,
the pre-RFC ``urn:ietf:params:xml:ns:siprec`` root ``recording_metadata`` of BroadWorks,
prefixed ``ns:`` forms); ids come from ``participant_id``/``stream_id`` (RFC) or ``id``
(Acme/Oracle and older drafts); send/recv stream ids may sit in
``<participantstreamassoc>`` (RFC) or directly in ``<participant>`` (drafts). DTDs and
entities are refused (no entity expansion on untrusted input).

Roles (DESIGN §2): the external party is the caller. A participant is the caller when
a vendor extension says so (``callingParty`` true, Acme/Oracle), else the one that was
the caller before (transfers keep the outside party), else the first participant in
document order. A stream takes the role of the participant that sends it; a stream
nobody sends (or a ``mixed`` one) is ``mixed`` or ``unknown``.

Updates (re-INVITE/UPDATE, issue 12): ``datamode`` complete replaces everything, partial
(RFC 7865 §6) changes only what it names: participants by id, a participant's stream
associations (its send/recv lists are replaced, and a stream it now sends is no longer
sent by participants the update does not name), streams by id, and participants whose
``participantsessionassoc`` carries a ``disassociate-time`` leave. When the caller
leaves or stops sending, whoever now sends what the caller sent is the external party
(the outside leg of a transfer keeps its role).

Early media (issue 10): whether the recorded call is answered yet. RFC 7865 has no
element for it, so a vendor extension is read wherever it sits (``<extensiondata>``,
``<session>``, the root; any namespace): an element named ``callstate``/``call-state``/
``call_state`` whose text is ``early``, ``alerting``, ``ringing``, ``progress`` or
``proceeding`` says the recorded call is not answered yet; any other text (``answered``,
``connected``, ``confirmed`` ...) says it is. A partial update without it keeps the
state; metadata that never says is answered (nothing is early by default).

Tenant (a multi-tenant platform, ``sip_bridge.tenant``): RFC 7865 has no element for it
either, so an element named ``tenant``/``tenant-id``/``tenant_id``/``tenantid`` is read
the same way (``<extensiondata>`` or anywhere, any namespace); its text, at most 256
characters, is the SRC's explicit tenant for the call, validated by the resolver. A
partial update without it keeps it; the call's tenant is decided when it starts.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace
from typing import Final

MAX_METADATA_BYTES: Final = 65_536
EARLY_STATES: Final = frozenset({"early", "alerting", "ringing", "progress", "proceeding"})
_CALL_STATE_NAMES: Final = frozenset({"callstate", "call-state", "call_state"})
_TENANT_NAMES: Final = frozenset({"tenant", "tenant-id", "tenant_id", "tenantid"})
NAMESPACE: Final = "urn:ietf:params:xml:ns:recording:1"


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1].rsplit(":", 1)[-1].lower()


def _children(elem: ET.Element, name: str) -> list[ET.Element]:
    return [c for c in elem if isinstance(c.tag, str) and _local(c.tag) == name]


def _text(elem: ET.Element, name: str) -> str:
    for c in _children(elem, name):
        return (c.text or "").strip()
    return ""


def _attr_id(elem: ET.Element, *names: str) -> str:
    for key, value in elem.attrib.items():
        if _local(key) in names:
            return value.strip()
    return ""


@dataclass(slots=True)
class Participant:
    participant_id: str
    aor: str = ""
    name: str = ""
    send: list[str] = field(default_factory=list)
    recv: list[str] = field(default_factory=list)
    calling: bool | None = None  # vendor hint: True for the calling party


@dataclass(slots=True)
class Stream:
    stream_id: str
    label: str = ""
    session_id: str = ""
    mode: str = ""  # "separate" / "mixed" where the client says


@dataclass(frozen=True, slots=True)
class StreamRole:
    label: str
    role: str  # external, internal, mixed, unknown
    participant: Participant | None


@dataclass(slots=True)
class RecordingMetadata:
    datamode: str = "complete"
    session_ids: list[str] = field(default_factory=list)
    participants: list[Participant] = field(default_factory=list)
    streams: list[Stream] = field(default_factory=list)
    associated: set[str] = field(default_factory=set)  # ids whose send/recv it states
    departed: set[str] = field(default_factory=set)  # ids disassociated from the session
    call_state: str = ""  # the recorded call's state where an extension says ("": unsaid)
    tenant: str = ""  # the SRC's tenant where an extension says ("": unsaid), unvalidated

    @property
    def early(self) -> bool:
        """The recorded call is not answered yet: its media is early media."""
        return self.call_state in EARLY_STATES

    @classmethod
    def parse(cls, data: bytes) -> RecordingMetadata:
        if len(data) > MAX_METADATA_BYTES:
            raise ValueError(f"recording metadata larger than {MAX_METADATA_BYTES} bytes")
        lowered = data.lower()
        if b"<!doctype" in lowered or b"<!entity" in lowered:
            raise ValueError("recording metadata must not contain a DTD or entities")
        try:
            root = ET.fromstring(data)
        except ET.ParseError as exc:
            raise ValueError(f"recording metadata is not well-formed XML: {exc}") from None
        if _local(root.tag) not in ("recording", "recording_metadata"):
            raise ValueError(f"unexpected metadata root element {_local(root.tag)[:32]!r}")
        meta = cls(datamode=_text(root, "datamode") or "complete")
        for s in _children(root, "session"):
            sid = _attr_id(s, "session_id", "id")
            if sid:
                meta.session_ids.append(sid)
        by_id: dict[str, Participant] = {}
        for p in _children(root, "participant"):
            part = _participant(p)
            meta.participants.append(part)
            by_id[part.participant_id] = part
        for s in _children(root, "stream"):
            meta.streams.append(
                Stream(
                    _attr_id(s, "stream_id", "id"),
                    _text(s, "label"),
                    _attr_id(s, "session_id", "session"),
                    _text(s, "mode").lower(),
                )
            )
        for part in meta.participants:
            if part.send or part.recv:
                meta.associated.add(part.participant_id)
        for assoc in _children(root, "participantstreamassoc"):
            pid = _attr_id(assoc, "participant_id", "id")
            target = by_id.get(pid)
            if target is None and pid and meta.datamode == "partial":
                target = by_id[pid] = Participant(pid)  # named only by its association
                meta.participants.append(target)
            if target is not None:
                target.send += [(c.text or "").strip() for c in _children(assoc, "send")]
                target.recv += [(c.text or "").strip() for c in _children(assoc, "recv")]
                meta.associated.add(pid)
        for assoc in _children(root, "participantsessionassoc"):
            if _children(assoc, "disassociate-time"):
                meta.departed.add(_attr_id(assoc, "participant_id", "id"))
        for elem in root.iter():
            if isinstance(elem.tag, str) and _local(elem.tag) in _CALL_STATE_NAMES:
                meta.call_state = (elem.text or "").strip().lower()[:32]
            elif isinstance(elem.tag, str) and _local(elem.tag) in _TENANT_NAMES:
                meta.tenant = (elem.text or "").strip()[:256] or meta.tenant
        return meta

    def merged(self, update: RecordingMetadata) -> RecordingMetadata:
        """This metadata after ``update`` (see the module doc); self is unchanged."""
        if update.datamode.lower() != "partial":
            return update
        out = RecordingMetadata(
            self.datamode,
            list(self.session_ids),
            [replace(p, send=list(p.send), recv=list(p.recv)) for p in self.participants],
            list(self.streams),
            call_state=update.call_state or self.call_state,
            tenant=update.tenant or self.tenant,
        )
        by_id = {p.participant_id: p for p in out.participants}
        for new in update.participants:
            old = by_id.get(new.participant_id)
            if old is None:
                old = by_id[new.participant_id] = replace(new, send=[], recv=[])
                out.participants.append(old)
            old.aor = new.aor or old.aor
            old.name = new.name or old.name
            old.calling = new.calling if new.calling is not None else old.calling
            if new.participant_id in update.associated:
                old.send, old.recv = list(new.send), list(new.recv)
        now_sent = {sid for p in update.participants for sid in p.send}
        for p in out.participants:
            if p.participant_id not in update.associated:
                p.send = [sid for sid in p.send if sid not in now_sent]
        out.participants = [p for p in out.participants if p.participant_id not in update.departed]
        streams = {s.stream_id: s for s in out.streams}
        for s in update.streams:
            streams[s.stream_id] = s
        out.streams = list(streams.values())
        out.session_ids += [sid for sid in update.session_ids if sid not in out.session_ids]
        return out

    def caller_id(self, was: str = "", previous: RecordingMetadata | None = None) -> str:
        """The participant id of the external party after an update: the one marked
        calling; else ``was`` while it is still here and sends; else whoever now sends
        the streams ``was`` sent in ``previous``; else the first participant."""
        for p in self.participants:
            if p.calling:
                return p.participant_id
        by_id = {p.participant_id: p for p in self.participants}
        if was in by_id and by_id[was].send:
            return was
        if was and previous is not None:
            sent = {sid for p in previous.participants if p.participant_id == was for sid in p.send}
            heirs = [p for p in self.participants if sent & set(p.send)]
            if len(heirs) == 1:
                return heirs[0].participant_id
        if was in by_id:
            return was
        return self.participants[0].participant_id if self.participants else ""

    def roles(self, caller_id: str = "") -> dict[str, StreamRole]:
        """SDP label -> the role of the leg that stream carries."""
        caller = self.caller(caller_id)
        out: dict[str, StreamRole] = {}
        for s in self.streams:
            if not s.label:
                continue
            senders = [p for p in self.participants if s.stream_id and s.stream_id in p.send]
            if s.mode == "mixed" or len(senders) > 1:
                out[s.label] = StreamRole(s.label, "mixed", None)
            elif not senders:
                out[s.label] = StreamRole(s.label, "unknown", None)
            else:
                sender = senders[0]
                role = "external" if sender is caller else "internal"
                out[s.label] = StreamRole(s.label, role, sender)
        return out

    def caller(self, caller_id: str = "") -> Participant | None:
        for p in self.participants:
            if p.calling:
                return p
        for p in self.participants:
            if caller_id and p.participant_id == caller_id:
                return p
        return self.participants[0] if self.participants else None

    def __bytes__(self) -> bytes:
        """RFC 7865 form (namespace ``urn:ietf:params:xml:ns:recording:1``)."""
        root = ET.Element("recording", {"xmlns": NAMESPACE})
        ET.SubElement(root, "datamode").text = self.datamode
        for sid in self.session_ids:
            ET.SubElement(root, "session", {"session_id": sid})
        for p in self.participants:
            pe = ET.SubElement(root, "participant", {"participant_id": p.participant_id})
            name_id = ET.SubElement(pe, "nameID", {"aor": p.aor})
            if p.name:
                ET.SubElement(name_id, "name").text = p.name
        for s in self.streams:
            attrs = {"stream_id": s.stream_id}
            if s.session_id:
                attrs["session_id"] = s.session_id
            ET.SubElement(ET.SubElement(root, "stream", attrs), "label").text = s.label
        for p in self.participants:
            assoc = ET.SubElement(
                root, "participantstreamassoc", {"participant_id": p.participant_id}
            )
            for sid in p.send:
                ET.SubElement(assoc, "send").text = sid
            for sid in p.recv:
                ET.SubElement(assoc, "recv").text = sid
        if self.call_state or self.tenant:
            ext = ET.SubElement(root, "extensiondata")
            if self.call_state:
                ET.SubElement(ext, "callstate").text = self.call_state
            if self.tenant:
                ET.SubElement(ext, "tenant").text = self.tenant
        out: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
        return out


def _participant(p: ET.Element) -> Participant:
    part = Participant(_attr_id(p, "participant_id", "id"))
    for name_id in _children(p, "nameid"):
        part.aor = _attr_id(name_id, "aor") or part.aor
        part.name = _text(name_id, "name") or part.name
    part.aor = part.aor or _text(p, "aor")
    part.send = [(c.text or "").strip() for c in _children(p, "send")]
    part.recv = [(c.text or "").strip() for c in _children(p, "recv")]
    for elem in p.iter():
        if isinstance(elem.tag, str) and _local(elem.tag) == "callingparty":
            part.calling = (elem.text or "").strip().lower() == "true"
    return part
