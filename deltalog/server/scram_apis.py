"""Kafka's DescribeUserScramCredentials (API key 50) and AlterUserScramCredentials (51) on the store's credentials
(:mod:`deltalog.scram`): what ``kafka-configs --bootstrap-server ... --entity-type users`` and the admin clients'
``describe_user_scram_credentials`` / ``alter_user_scram_credentials`` send (KIP-554).

As Kafka's ``ControllerApis`` / ``ScramControlManager``: an upsertion carries the salt and the salted password (the
client salts the password; the broker derives the stored and server keys and keeps those); errors are per user:
``UNSUPPORTED_SASL_MECHANISM`` for a mechanism other than SCRAM-SHA-256/512, ``UNACCEPTABLE_CREDENTIAL`` for an
iteration count outside 4096..16384 or an empty salt or password, ``RESOURCE_NOT_FOUND`` for deleting (or
describing) a credential that does not exist, ``DUPLICATE_RESOURCE`` for a user named twice in one describe or a
mechanism altered twice for one user. A user's alterations are all checked before the first is written (a
deletion of a credential the user lacks fails at its turn, after any before it). Without
``authorizer.class.name`` any client the listener lets in may call them, as on a Kafka broker without one; with
it, DESCRIBE and ALTER on the cluster are needed (:mod:`deltalog.server.authorization`).
"""

from __future__ import annotations

from typing import Any

from deltalog import scram
from deltalog.errors import DeltalogError, ResourceNotFoundError
from deltalog.server import protocol as p
from deltalog.server.served_store import ServedStore

#: Kafka's ``ScramMechanism`` type bytes.
MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_BYTES = {name: t for t, name in MECHANISM_TYPES.items()}


def handle_describe(store: ServedStore, request: p.Request) -> Any:
    cls = request.response_class
    credentials = scram.ScramCredentials(store.storage)
    names = None if request.body.users is None else [u.name for u in request.body.users]
    results = []
    if names is None:
        found = credentials.describe()
        names = list(found)
    else:
        found = {}
    seen: set[str] = set()
    for name in names:
        code, message, infos = p.NONE, None, []
        if name in seen:
            code, message = p.DUPLICATE_RESOURCE, f"Cannot describe SCRAM credentials for the same user twice: {name}"
        else:
            try:
                infos = list((found.get(name) or credentials.describe([name])[name]).items())
            except ResourceNotFoundError as e:
                code, message = e.errno, f"Attempt to describe a user credential that does not exist: {name}"
            except DeltalogError as e:
                code, message = e.errno, str(e)
        seen.add(name)
        results.append(cls.DescribeUserScramCredentialsResult(
            user=name, error_code=code, error_message=message,
            credential_infos=[cls.DescribeUserScramCredentialsResult.CredentialInfo(
                mechanism=MECHANISM_BYTES[m], iterations=i) for m, i in infos]))
    return cls(throttle_time_ms=0, error_code=p.NONE, error_message=None, results=results)


def handle_alter(store: ServedStore, request: p.Request) -> Any:
    cls = request.response_class
    credentials = scram.ScramCredentials(store.storage)
    by_user: dict[str, list[tuple[str, Any]]] = {}
    for d in request.body.deletions:
        by_user.setdefault(d.name, []).append(("delete", d))
    for u in request.body.upsertions:
        by_user.setdefault(u.name, []).append(("upsert", u))
    results = []
    for user, items in by_user.items():
        try:
            code, message, planned = _plan(user, items)
            for mechanism, credential in planned:
                if credential is None:
                    credentials.delete(user, mechanism)
                else:
                    credentials.put(user, mechanism, credential)
        except DeltalogError as e:
            code, message = e.errno, str(e)
        results.append(cls.AlterUserScramCredentialsResult(user=user, error_code=code, error_message=message))
    return cls(throttle_time_ms=0, results=results)


def _plan(user: str, items: list[tuple[str, Any]]
          ) -> tuple[int, str | None, list[tuple[str, scram.ScramCredential | None]]]:
    """(error code, message, what to write) for ``user``'s alterations, all checked before the first is written;
    nothing to write when there is an error."""
    planned: list[tuple[str, scram.ScramCredential | None]] = []
    for kind, item in items:
        mechanism = MECHANISM_TYPES.get(item.mechanism)
        if mechanism is None:
            return p.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism type {item.mechanism} for user {user}", []
        if any(m == mechanism for m, _ in planned):
            return (p.DUPLICATE_RESOURCE, f"A user credential cannot be altered twice in the same request: {user} "
                    f"{mechanism}", [])
        if kind == "delete":
            planned.append((mechanism, None))
        else:
            planned.append((mechanism, scram.credential_from_salted(
                mechanism, bytes(item.salted_password or b""), bytes(item.salt or b""), item.iterations)))
    return p.NONE, None, planned
