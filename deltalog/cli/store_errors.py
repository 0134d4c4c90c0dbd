"""An object store that cannot be reached, or that refuses the credentials, as one line: which store, what failed,
and the likely fix (the environment variables the object store client reads), instead of the client's traceback
and its multi-line debug dump.

The errors come from obstore and delta-rs (both on the object_store crate), whose messages carry the HTTP status or
the connection error; they are recognised by those words, the only part of them that is stable across versions.
"""

from __future__ import annotations

import os
import re

#: The variables object_store reads per scheme: (endpoint and network, credentials).
_ENV = {
    "s3": (("AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP (for http://)", "AWS_REGION"),
           ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION")),
    "az": (("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ENDPOINT", "AZURE_STORAGE_USE_EMULATOR"),
           ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_KEY", "AZURE_CLIENT_ID / AZURE_CLIENT_SECRET")),
    "gs": (("GOOGLE_CLOUD_STORAGE_ENDPOINT (an emulator)",),
           ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_SERVICE_ACCOUNT")),
}
_SCHEMES = {"s3": "s3", "s3a": "s3", "az": "az", "abfs": "az", "abfss": "az", "azure": "az", "adl": "az",
            "gs": "gs", "gcs": "gs"}
_REFUSED = re.compile(r"\b(40[13])\b|Forbidden|PermissionDenied|Unauthenticated|InvalidAccessKeyId|"
                      r"SignatureDoesNotMatch|AccessDenied|AuthorizationFailure|ExpiredToken", re.I)
_UNREACHABLE = re.compile(r"error sending request|Connection refused|ConnectError|tcp connect error|dns error|"
                          r"failed to lookup address|timed out|Connection reset|connection closed", re.I)
_URL = re.compile(r"https?://[^\s/,]+")


def one_line(error: BaseException, store: str | None) -> str | None:
    """The one-line message for ``error`` if it is an object store refusing the credentials or not answering at
    ``store`` (a URI); None for any other error."""
    if store is None:
        return None
    scheme = _SCHEMES.get(store.split("://", 1)[0].lower()) if "://" in store else None
    if scheme is None:
        return None
    text = str(error)
    first = text.split("\n", 1)[0]
    endpoint = _URL.search(text)
    where = f" at {endpoint.group(0)}" if endpoint else ""
    network, credentials = _ENV[scheme]
    if _REFUSED.search(text):
        status = re.search(r"\b(40[13])\b[^:\n]*", first)
        said = status.group(0).strip() if status else "access denied"
        return (f"the object store {store}{where} refused the credentials ({said}); check "
                f"{', '.join(credentials)}{_set(credentials)} (or give them with --storage-option KEY=VALUE), and "
                "that they may read and write that bucket")
    if _UNREACHABLE.search(text):
        retries = re.search(r"after (\d+) retries", first)
        after = f" after {retries.group(1)} retries" if retries else ""
        cause = "connection refused" if re.search("Connection refused", text, re.I) else \
            "timed out" if re.search("timed out", text, re.I) else "no connection"
        return (f"cannot reach the object store {store}{where}: {cause}{after}; check {', '.join(network)}"
                f"{_set(network)} (or --storage-option KEY=VALUE) and that the service is running")
    return None


def _set(names: tuple[str, ...]) -> str:
    """Which of ``names`` are set in the environment now (their values only for endpoints: never a secret)."""
    shown = []
    for name in names:
        var = name.split(" ")[0]
        value = os.environ.get(var)
        if value is not None:
            shown.append(f"{var}={value}" if "ENDPOINT" in var else f"{var} is set")
    return f" (now: {', '.join(shown)})" if shown else " (none is set)"


__all__ = ["one_line"]
