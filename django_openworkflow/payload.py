"""JSON payloads: encode once, check size and type, hand back what replay will see."""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from .conf import owf_settings
from .errors import PayloadError


def to_json_value(value: Any, what: str) -> Any:
    """Return ``value`` as it will read back from the database.

    Encoding with Django's JSON encoder (datetimes, decimals and UUIDs become
    strings; tuples become lists) and decoding again means the first execution
    sees exactly what every replay will see. ``what`` names the value in
    errors ("input of workflow 'x'", "output of step 'y'").
    """
    try:
        encoded = json.dumps(value, cls=DjangoJSONEncoder, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ValueError) and "out of range float" in str(exc).lower():
            raise PayloadError(f"{what} contains NaN or Infinity, which JSON cannot hold") from None
        raise PayloadError(
            f"{what} is not JSON-serializable: {exc} (only JSON types, datetimes, decimals and UUIDs can be stored)"
        ) from None
    limit = owf_settings.max_payload_bytes
    size = len(encoded.encode())
    if size > limit:
        raise PayloadError(
            f"{what} is {size} bytes of JSON, over the limit of {limit} (OPENWORKFLOW['MAX_PAYLOAD_BYTES'])"
        )
    return json.loads(encoded)
