"""SCRAM credentials of the store's users, kept as Kafka keeps them: salt, iterations, stored key and server key
(RFC 5802 section 3, Kafka's ``ScramCredential`` and ``ScramFormatter``), never the password.

Kafka stores a user's credential per mechanism (SCRAM-SHA-256 and SCRAM-SHA-512, RFC 7677) in its metadata
(``ScramControlManager``: what ``kafka-configs --alter --entity-type users --add-config 'SCRAM-SHA-256=[...]'`` and
``Admin.alterUserScramCredentials`` write). deltalog keeps one JSON document per user under
``_deltalog/users/`` (named by the SHA-256 of the user name, so any name is a file name), written by
compare-and-swap like the store's other documents, so two administrators altering one user at once both land.
``deltalog serve`` reads the document at each authentication: a credential added or deleted takes effect on the
next connection, as Kafka's brokers apply a credential change without a restart.

The derivation (``ScramFormatter``): ``SaltedPassword = Hi(password, salt, i)`` (PBKDF2 with HMAC of the
mechanism's hash), ``ClientKey = HMAC(SaltedPassword, "Client Key")``, ``StoredKey = H(ClientKey)``,
``ServerKey = HMAC(SaltedPassword, "Server Key")``. The iteration count is Kafka's range: 4096 (the default, as
``kafka-configs`` when none is given) to 16384.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Any

from deltalog.errors import (
    CommitConflictError,
    CorruptStateError,
    InvalidArgumentError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
)
from deltalog.storage import Storage

#: The SCRAM mechanisms Kafka offers (``ScramMechanism``) and the hash each one uses.
MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's ``ScramMechanism.minIterations`` and the most ``AlterUserScramCredentials`` accepts.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
#: Where the users' documents live in a store.
USERS_DIR = ("_deltalog", "users")
_CAS_ATTEMPTS = 20


@dataclass(frozen=True)
class ScramCredential:
    """Kafka's ``ScramCredential``: what the server needs to check a client's proof and sign its answer."""

    salt: bytes
    server_key: bytes
    stored_key: bytes
    iterations: int

    def to_json(self) -> dict[str, Any]:
        b64 = base64.b64encode
        return {"salt": b64(self.salt).decode(), "stored_key": b64(self.stored_key).decode(),
                "server_key": b64(self.server_key).decode(), "iterations": self.iterations}

    @classmethod
    def from_json(cls, doc: Any) -> ScramCredential:
        d = base64.b64decode
        return cls(salt=d(doc["salt"], validate=True), server_key=d(doc["server_key"], validate=True),
                   stored_key=d(doc["stored_key"], validate=True), iterations=int(doc["iterations"]))


def check_mechanism(mechanism: str) -> str:
    """``mechanism`` if it is a SCRAM mechanism, else :class:`UnacceptableCredentialError` naming the two."""
    if mechanism not in MECHANISMS:
        raise UnacceptableCredentialError(f"unknown SCRAM mechanism {mechanism!r}: use one of {sorted(MECHANISMS)}")
    return mechanism


def hmac_digest(mechanism: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, MECHANISMS[mechanism]).digest()


def hash_digest(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(MECHANISMS[mechanism], data).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's ``Hi(Normalize(password), salt, i)``: PBKDF2 with the mechanism's HMAC (Kafka, like the Java SCRAM
    clients, does not apply SASLprep; neither does this)."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode("utf-8"), salt, iterations)


def make_credential(mechanism: str, password: str, *, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """The credential of ``password`` (Kafka's ``ScramFormatter.generateCredential``): a fresh random salt unless one
    is given. Raises :class:`UnacceptableCredentialError` for an iteration count outside Kafka's range or an empty
    password."""
    check_mechanism(mechanism)
    if isinstance(iterations, bool) or not isinstance(iterations, int):
        raise UnacceptableCredentialError(f"iterations must be an integer, not {iterations!r}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UnacceptableCredentialError(
            f"iterations={iterations} for {mechanism} is not allowed: it must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    if not isinstance(password, str) or not password:
        raise UnacceptableCredentialError(f"the password for {mechanism} must be a non-empty string")
    salt = os.urandom(32) if salt is None else bytes(salt)
    if not salt:
        raise UnacceptableCredentialError("the salt must not be empty")
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt,
                                  iterations)


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """The credential of a salted password, which is what ``AlterUserScramCredentials`` carries (the client salts
    the password; the broker derives the keys: Kafka's ``ScramCredentialUtils``)."""
    check_mechanism(mechanism)
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UnacceptableCredentialError(
            f"iterations={iterations} for {mechanism} is not allowed: it must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    if not salted or not salt:
        raise UnacceptableCredentialError("the salted password and the salt must not be empty")
    client_key = hmac_digest(mechanism, salted, b"Client Key")
    return ScramCredential(salt=salt, server_key=hmac_digest(mechanism, salted, b"Server Key"),
                           stored_key=hash_digest(mechanism, client_key), iterations=iterations)


def _check_user(user: Any) -> str:
    if not isinstance(user, str) or not user:
        raise UnacceptableCredentialError(f"a user name must be a non-empty string, not {user!r}")
    return user


class ScramCredentials:
    """The SCRAM credentials of the store at ``storage``: what ``deltalog configs --entity-type users`` and
    ``store.admin()``'s ``alter_user_scram_credentials`` write, and what ``deltalog serve`` checks."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def _location(self, user: str) -> str:
        return self.storage.location(*USERS_DIR, hashlib.sha256(user.encode("utf-8")).hexdigest() + ".json")

    def _read(self, location: str) -> tuple[dict[str, Any], str | None]:
        found = self.storage.read_versioned(location)
        if found is None:
            return {}, None
        return parse_document(found.data, location), found.etag

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's credential for ``mechanism``; None when the user has none."""
        doc, _ = self._read(self._location(user))
        if doc.get("user") != user:
            return None
        raw = doc.get("scram", {}).get(mechanism)
        return None if raw is None else ScramCredential.from_json(raw)

    def describe(self, users: list[str] | None = None) -> dict[str, dict[str, int]]:
        """user -> {mechanism: iterations} for ``users`` (every user with a credential when None); a named user
        without any credential raises :class:`ResourceNotFoundError`, as Kafka's ``RESOURCE_NOT_FOUND``."""
        out: dict[str, dict[str, int]] = {}
        if users is None:
            for info in self.storage.list_files(self.storage.location(*USERS_DIR)):
                if info.location.endswith(".json"):
                    doc, _ = self._read(info.location)
                    if doc.get("scram"):
                        out[doc["user"]] = {m: int(c["iterations"]) for m, c in sorted(doc["scram"].items())}
            return dict(sorted(out.items()))
        for user in users:
            doc, _ = self._read(self._location(_check_user(user)))
            if doc.get("user") != user or not doc.get("scram"):
                raise ResourceNotFoundError(f"attempt to describe a user credential that does not exist: {user!r}")
            out[user] = {m: int(c["iterations"]) for m, c in sorted(doc["scram"].items())}
        return out

    def upsert(self, user: str, mechanism: str, password: str, *, iterations: int = MIN_ITERATIONS,
               salt: bytes | None = None) -> ScramCredential:
        """Set the user's credential for ``mechanism`` from ``password`` (its other mechanism is kept)."""
        _check_user(user)
        return self.put(user, mechanism, make_credential(mechanism, password, iterations=iterations, salt=salt))

    def put(self, user: str, mechanism: str, credential: ScramCredential) -> ScramCredential:
        """Set the user's credential for ``mechanism`` (see :func:`credential_from_salted`)."""
        _check_user(user)
        check_mechanism(mechanism)
        self._change(user, lambda scram: scram.__setitem__(mechanism, credential.to_json()))
        return credential

    def delete(self, user: str, mechanism: str) -> None:
        """Remove the user's credential for ``mechanism``; :class:`ResourceNotFoundError` when it has none."""
        _check_user(user)
        check_mechanism(mechanism)

        def remove(scram: dict[str, Any]) -> None:
            if mechanism not in scram:
                raise ResourceNotFoundError(
                    f"attempt to delete a user credential that does not exist: {user!r} has no {mechanism}")
            del scram[mechanism]

        self._change(user, remove)

    def _change(self, user: str, change: Any) -> None:
        location = self._location(user)
        for _ in range(_CAS_ATTEMPTS):
            doc, etag = self._read(location)
            scram = dict(doc.get("scram", {})) if doc.get("user") == user else {}
            change(scram)
            new = {"user": user, "scram": scram}
            if etag is None:
                done = self.storage.create_json(location, new)
            else:
                done = self.storage.replace_json(location, new, etag)
            if done is not None:
                return
        raise CommitConflictError(f"{location}: the user's document kept changing under {_CAS_ATTEMPTS} attempts "
                                  "to alter it; try again")


def parse_document(raw: bytes, location: str) -> dict[str, Any]:
    """A user's document, checked: :class:`CorruptStateError` naming the file when it cannot be what is written."""
    import json

    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or not isinstance(doc.get("user"), str) or not isinstance(doc.get("scram"),
                                                                                                dict):
            raise InvalidArgumentError("not a user document")
        for mechanism, credential in doc["scram"].items():
            check_mechanism(mechanism)
            ScramCredential.from_json(credential)
    except (ValueError, KeyError, TypeError) as e:
        fix = ("The user cannot authenticate with SCRAM until it is fixed: delete the file and set the credential "
               "again with 'deltalog configs --alter --entity-type users'")
        raise CorruptStateError(f"{location}: the SCRAM credential document is damaged ({e}). {fix}",
                                location=location, fix=fix) from None
    return doc
