"""Kafka's access control lists for ``deltalog serve``: resource patterns, operations, principals and hosts, with
the decisions of Kafka's ``StandardAuthorizer`` (KIP-801; ``AclAuthorizer`` decides the same).

An ACL binding (Kafka's ``AclBinding``) is a resource pattern (type, name, LITERAL or PREFIXED) and an entry
(principal ``User:name`` or ``User:*``, host ``*`` or an IP, operation, ALLOW or DENY). A request of principal P from
host H to do operation O on resource R is decided as ``StandardAuthorizerData.authorize``:

- a principal of ``super.users`` is allowed everything;
- the bindings whose pattern matches R (LITERAL of R's name or of ``*``, PREFIXED of a prefix of R's name) and whose
  principal and host match P and H are looked at: a DENY of O (or of ALL) refuses, whatever else allows;
- else an ALLOW of O, of ALL, or of an operation implying O allows: READ, WRITE, DELETE and ALTER imply DESCRIBE,
  ALTER_CONFIGS implies DESCRIBE_CONFIGS (Kafka's ``AclEntry.supportedOperations`` and the implication table of
  ``StandardAuthorizerData``);
- else, when no binding at all (of any principal) matches R, ``allow.everyone.if.no.acl.found`` decides; otherwise
  refused.

The bindings are one JSON document of the store (``_deltalog/acls.json``), changed by compare-and-swap as the
users' SCRAM credentials are (:mod:`deltalog.scram`): every endpoint of the store enforces the same ACLs, and an
ACL created through one endpoint binds the others once their cache refreshes (:data:`REFRESH_S`), as Kafka's brokers
apply ACL records from the metadata log.
"""

from __future__ import annotations

import ipaddress
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from enum import IntEnum
from typing import Any

from deltalog.errors import CommitConflictError, CorruptStateError, InvalidAclError, InvalidConfigError
from deltalog.storage import Storage


class ResourceType(IntEnum):
    """Kafka's ``ResourceType`` and its wire codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    """Kafka's ``PatternType``: LITERAL and PREFIXED for bindings; ANY and MATCH only in filters."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    """Kafka's ``AclOperation`` and its wire codes."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


_O = AclOperation
#: The operations each resource type has (Kafka's ``AclEntry.supportedOperations``): what a response's
#: ``authorizedOperations`` reports on, each one the principal is allowed.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER, _O.DESCRIBE_CONFIGS,
                         _O.ALTER_CONFIGS),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE),
    ResourceType.CLUSTER: (_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE,
                           _O.ALTER, _O.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE),
    ResourceType.DELEGATION_TOKEN: (_O.DESCRIBE,),
    ResourceType.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}


class AclPermissionType(IntEnum):
    """Kafka's ``AclPermissionType``."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: ``ResourcePattern.WILDCARD_RESOURCE``, ``AclEntry.WILDCARD_PRINCIPAL_STRING`` and ``WILDCARD_HOST``.
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
#: The principal of a connection that did not authenticate (Kafka's ``KafkaPrincipal.ANONYMOUS``).
ANONYMOUS = "User:ANONYMOUS"
#: The only name a CLUSTER resource has (Kafka's ``ResourcePattern.CLUSTER_NAME``).
CLUSTER_NAME = "kafka-cluster"
#: Operations an ALLOW of the key grants besides itself (``StandardAuthorizerData``'s implication).
IMPLIED: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.READ: frozenset({AclOperation.DESCRIBE}),
    AclOperation.WRITE: frozenset({AclOperation.DESCRIBE}),
    AclOperation.DELETE: frozenset({AclOperation.DESCRIBE}),
    AclOperation.ALTER: frozenset({AclOperation.DESCRIBE}),
    AclOperation.ALTER_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS}),
}
#: The names ``authorizer.class.name`` accepts (Kafka's two ACL authorizers; deltalog decides as both do).
AUTHORIZER_CLASSES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                      "kafka.security.authorizer.AclAuthorizer")
#: Where the bindings live in a store.
ACLS_FILE = ("_deltalog", "acls.json")
#: How long an endpoint trusts the bindings it read before it reads them again.
REFRESH_S = 1.0
_CAS_ATTEMPTS = 20


@dataclass(frozen=True, order=True)
class AclBinding:
    """Kafka's ``AclBinding``: a resource pattern and an access control entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def to_json(self) -> dict[str, Any]:
        return {k: (v.name if isinstance(v, IntEnum) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> AclBinding:
        return cls(ResourceType[doc["resource_type"]], doc["resource_name"], PatternType[doc["pattern_type"]],
                   doc["principal"], doc["host"], AclOperation[doc["operation"]],
                   AclPermissionType[doc["permission"]])

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission.name}) on ResourcePattern(resourceType={self.resource_type.name}, "
                f"name={self.resource_name}, patternType={self.pattern_type.name})")


def check_binding(b: AclBinding) -> AclBinding:
    """``b`` if it can be created, else :class:`InvalidAclError` naming the field (Kafka's
    ``AclControlManager.validateNewAcl``)."""
    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAclError(f"an ACL's resource type must be one of TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, "
                              f"DELEGATION_TOKEN, USER, not {b.resource_type.name}")
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAclError(f"an ACL's pattern type must be LITERAL or PREFIXED, not {b.pattern_type.name}")
    if not b.resource_name:
        raise InvalidAclError("an ACL's resource name must not be empty")
    if b.resource_type == ResourceType.CLUSTER and (b.resource_name != CLUSTER_NAME
                                                    or b.pattern_type != PatternType.LITERAL):
        raise InvalidAclError(f"a CLUSTER ACL's resource is the LITERAL {CLUSTER_NAME!r}, not {b.resource_name!r} "
                              f"{b.pattern_type.name}")
    if b.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidAclError(f"an ACL's operation must be a named operation or ALL, not {b.operation.name}")
    if b.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidAclError(f"an ACL's permission must be ALLOW or DENY, not {b.permission.name}")
    check_principal(b.principal)
    if b.host != WILDCARD:
        try:
            ipaddress.ip_address(b.host)
        except ValueError:
            raise InvalidAclError(f"an ACL's host must be '*' or an IP address, not {b.host!r}") from None
    return b


def check_principal(principal: str) -> str:
    kind, sep, name = (principal or "").partition(":")
    if not sep or not kind or not name:
        raise InvalidAclError(f"a principal is 'User:<name>' (or 'User:*'), not {principal!r}")
    return principal


@dataclass(frozen=True)
class AclFilter:
    """Kafka's ``AclBindingFilter``: None for a field that matches anything; ANY for an enum that does; pattern type
    MATCH matches the bindings that would apply to the named resource (LITERAL of it or of ``*``, PREFIXED of a
    prefix of it)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is not None and not _pattern_matches(b, self.resource_name):
                return False
        else:
            if self.pattern_type != PatternType.ANY and b.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and b.resource_name != self.resource_name:
                return False
        return ((self.principal is None or b.principal == self.principal)
                and (self.host is None or b.host == self.host)
                and (self.operation == AclOperation.ANY or b.operation == self.operation)
                and (self.permission == AclPermissionType.ANY or b.permission == self.permission))


def _pattern_matches(b: AclBinding, name: str) -> bool:
    if b.pattern_type == PatternType.LITERAL:
        return b.resource_name in (name, WILDCARD)
    return b.pattern_type == PatternType.PREFIXED and name.startswith(b.resource_name)


def authorize(bindings: Iterable[AclBinding], principal: str, host: str, operation: AclOperation,
              resource_type: ResourceType, name: str, *, super_users: frozenset[str] = frozenset(),
              allow_if_no_acl: bool = False) -> bool:
    """Whether ``principal`` from ``host`` may do ``operation`` on the resource (see the module doc)."""
    if principal in super_users:
        return True
    found = allowed = False
    for b in bindings:
        if b.resource_type != resource_type or not _pattern_matches(b, name):
            continue
        found = True
        if b.principal not in (principal, WILDCARD_PRINCIPAL) or b.host not in (host, WILDCARD):
            continue
        if b.permission == AclPermissionType.DENY:
            if b.operation in (operation, AclOperation.ALL):
                return False
        elif b.operation in (operation, AclOperation.ALL) or operation in IMPLIED.get(b.operation, ()):
            allowed = True
    return allowed or (not found and allow_if_no_acl)


class AclStore:
    """The store's ACL bindings: what CreateAcls/DeleteAcls and ``deltalog acls`` change and every endpoint reads."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.location = storage.location(*ACLS_FILE)

    def _read(self) -> tuple[list[AclBinding], str | None]:
        found = self.storage.read_versioned(self.location)
        if found is None:
            return [], None
        try:
            doc = json.loads(found.data)
            return [AclBinding.from_json(d) for d in doc["acls"]], found.etag
        except (ValueError, KeyError, TypeError) as e:
            fix = "fix or delete the file, then list and add the ACLs again with 'deltalog acls'"
            raise CorruptStateError(f"{self.location}: the ACL document is damaged ({e}); {fix}",
                                    location=self.location, fix=fix) from None

    def bindings(self) -> list[AclBinding]:
        return self._read()[0]

    def describe(self, flt: AclFilter) -> list[AclBinding]:
        return [b for b in self.bindings() if flt.matches(b)]

    def create(self, bindings: Iterable[AclBinding]) -> None:
        """Add ``bindings`` (each checked first; one already there is kept once, as Kafka)."""
        new = [check_binding(b) for b in bindings]
        self._change(lambda old: sorted(set(old) | set(new)))

    def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Remove the bindings each filter matches; the bindings each one removed."""
        removed: list[list[AclBinding]] = []

        def change(old: list[AclBinding]) -> list[AclBinding]:
            removed[:] = [[b for b in old if f.matches(b)] for f in filters]
            return [b for b in old if not any(f.matches(b) for f in filters)]

        self._change(change)
        return removed

    def _change(self, change: Callable[[list[AclBinding]], list[AclBinding]]) -> None:
        for _ in range(_CAS_ATTEMPTS):
            old, etag = self._read()
            doc = {"acls": [b.to_json() for b in change(old)]}
            if etag is None:
                done = self.storage.create_json(self.location, doc)
            else:
                done = self.storage.replace_json(self.location, doc, etag)
            if done is not None:
                return
        raise CommitConflictError(f"{self.location}: the ACLs kept changing under {_CAS_ATTEMPTS} attempts to "
                                  "change them; try again")


def check_authorizer(props: Mapping[str, str]) -> tuple[list[str], bool] | None:
    """(``super.users``, ``allow.everyone.if.no.acl.found``) when ``authorizer.class.name`` asks for an authorizer;
    None when it is not set. Raises :class:`InvalidConfigError` naming the config that is wrong."""
    name = (props.get("authorizer.class.name") or "").strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASSES:
        raise InvalidConfigError(f"authorizer.class.name={name!r} is not served: use one of {AUTHORIZER_CLASSES}")
    allow = (props.get("allow.everyone.if.no.acl.found") or "false").strip().lower()
    if allow not in ("true", "false"):
        raise InvalidConfigError(f"allow.everyone.if.no.acl.found={allow!r} must be true or false")
    supers = [u.strip() for u in (props.get("super.users") or "").split(";") if u.strip()]
    for u in supers:
        if not u.partition(":")[2]:
            raise InvalidConfigError(f"super.users: {u!r} is not a principal: give User:<name>;User:<name>...")
    return supers, allow == "true"


class Authorizer:
    """An endpoint's authorizer (Kafka's ``Authorizer.authorize``): the store's bindings read at most every
    :data:`REFRESH_S`, ``super.users`` and ``allow.everyone.if.no.acl.found``."""

    def __init__(self, acls: AclStore, *, super_users: Iterable[str] = (), allow_if_no_acl: bool = False,
                 refresh_s: float = REFRESH_S) -> None:
        self.acls = acls
        self.super_users = frozenset(u.strip() for u in super_users if u.strip())
        self.allow_if_no_acl = allow_if_no_acl
        self.refresh_s = refresh_s
        self._cached: tuple[float, list[AclBinding]] = (-1e18, [])
        self._lock = threading.Lock()

    @classmethod
    def from_properties(cls, storage: Storage, props: Mapping[str, str]) -> Authorizer | None:
        """The authorizer ``authorizer.class.name`` asks for; None when it is not set (everything allowed, as a
        Kafka broker without one). Raises :class:`InvalidConfigError` naming the config that is wrong."""
        found = check_authorizer(props)
        if found is None:
            return None
        supers, allow = found
        return cls(AclStore(storage), super_users=supers, allow_if_no_acl=allow)

    def bindings(self) -> list[AclBinding]:
        with self._lock:
            at, bindings = self._cached
            if time.monotonic() - at >= self.refresh_s:
                bindings = self.acls.bindings()
                self._cached = (time.monotonic(), bindings)
            return bindings

    def invalidate(self) -> None:
        """Read the bindings again at the next decision (this endpoint changed them)."""
        with self._lock:
            self._cached = (-1e18, self._cached[1])

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        return authorize(self.bindings(), principal, host, operation, resource_type, name,
                         super_users=self.super_users, allow_if_no_acl=self.allow_if_no_acl)


__all__ = ["ACLS_FILE", "ANONYMOUS", "AUTHORIZER_CLASSES", "AclBinding", "AclFilter", "AclOperation",
           "AclPermissionType", "AclStore", "Authorizer", "CLUSTER_NAME", "PatternType", "ResourceType", "authorize",
           "check_authorizer", "check_binding"]
