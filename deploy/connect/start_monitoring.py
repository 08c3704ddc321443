"""AWS Lambda for an Amazon Connect contact flow: start (or stop) CallShield monitoring
of the contact's live media stream.

Place it after a *Start media streaming* block (customer audio both directions), as
*Invoke AWS Lambda function*. Connect passes the contact's data; this reads
``ContactId``, ``InitialContactId``, ``InstanceARN``, the customer and system endpoints
and ``MediaStreams.Customer.Audio`` (``StreamARN``, ``StartFragmentNumber``,
``StartTimestamp``) and calls the bridge's ``POST /v1/connect/contacts``. With the flow
parameter ``action`` = ``stop`` (e.g. in a disconnect flow) it calls ``DELETE``.
The contact's tenant (which client company's rules apply): the flow parameter
``tenant``, else the contact attribute ``callshield_tenant`` (set it with *Set contact
attributes* before this block); the bridge validates it and, when it refuses it
(malformed, not a known tenant), counts it and falls back to its DNIS mapping or default.

It answers with flat string attributes a *Check contact attributes* block can branch
on: ``callshield_status`` (``monitoring``, ``stopped``, ``error``),
``callshield_call_id``, ``callshield_error``. It never raises, so the call never takes
the Error branch because monitoring is unavailable.

Environment: ``CALLSHIELD_BRIDGE_URL`` (``https://bridge.internal:8180``; the Lambda
runs in a VPC that reaches it), ``CALLSHIELD_CONTROL_API_TOKEN`` (better: put it in
Secrets Manager and read it at cold start), ``CALLSHIELD_TIMEOUT_S`` (default 3; a
flow waits at most 8 s for a Lambda). Standard library only: no layer needed.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

PATH = "/v1/connect/contacts"


def _request(method: str, url: str, token: str, body: dict[str, Any] | None, timeout: float) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


def contact_request(event: dict[str, Any]) -> dict[str, Any]:
    """The bridge's request body from a contact flow event."""
    data = event["Details"]["ContactData"]
    audio = ((data.get("MediaStreams") or {}).get("Customer") or {}).get("Audio") or {}
    body: dict[str, Any] = {
        "contact_id": data["ContactId"],
        "stream_arn": audio["StreamARN"],
    }
    optional = {
        "start_fragment": audio.get("StartFragmentNumber"),
        "start_timestamp": audio.get("StartTimestamp"),
        "instance_id": data.get("InstanceARN"),
        "initial_contact_id": data.get("InitialContactId"),
        "ani": (data.get("CustomerEndpoint") or {}).get("Address"),
        "dnis": (data.get("SystemEndpoint") or {}).get("Address"),
        "tenant": (event["Details"].get("Parameters") or {}).get("tenant")
        or (data.get("Attributes") or {}).get("callshield_tenant"),
    }
    body.update({k: str(v) for k, v in optional.items() if v})
    return body


def lambda_handler(event: dict[str, Any], context: Any = None) -> dict[str, str]:
    base = os.environ["CALLSHIELD_BRIDGE_URL"].rstrip("/") + PATH
    token = os.environ["CALLSHIELD_CONTROL_API_TOKEN"]
    timeout = float(os.environ.get("CALLSHIELD_TIMEOUT_S", "3"))
    params = event.get("Details", {}).get("Parameters") or {}
    try:
        if params.get("action") == "stop":
            contact = event["Details"]["ContactData"]["ContactId"]
            _request(
                "DELETE", f"{base}/{urllib.parse.quote(contact, safe='')}", token, None, timeout
            )
            return {"callshield_status": "stopped"}
        view = _request("POST", base, token, contact_request(event), timeout)
        return {"callshield_status": "monitoring", "callshield_call_id": str(view["call_id"])}
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:200]
        return {"callshield_status": "error", "callshield_error": f"HTTP {exc.code}: {detail}"}
    except (urllib.error.URLError, OSError, KeyError, ValueError) as exc:
        return {"callshield_status": "error", "callshield_error": f"{type(exc).__name__}: {exc}"}
